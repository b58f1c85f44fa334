package gcs_test

import (
	"context"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
	"github.com/airflow-sandbox/airflow-go-worker/testing/storagetest"
)

// gs:// and gcs:// name the store; both connection types reach it.
func TestURLsAndConnectionTypes(t *testing.T) {
	loc, err := storage.Default.Parse("gcs://gcp_prod@bucket/a/b")
	if err != nil || loc.Scheme != "gs" || loc.Bucket != "bucket" || loc.Key != "a/b" || loc.ConnID != "gcp_prod" || loc.String() != "gcs://bucket/a/b" {
		t.Errorf("ParseURL: %+v (%s), %v", loc, loc, err)
	}
	if _, err := storage.Default.Parse("gs://AKIA:secret@bucket/k"); err == nil || !strings.Contains(err.Error(), "put them in a google_cloud_platform connection") {
		t.Errorf("credentials in the URL: %v", err)
	}
	for _, typ := range []string{"google_cloud_platform", "gcp", ""} {
		if _, err := storage.Default.FromConnection("gs", connections.Connection{ConnID: "c", ConnType: typ}); err != nil {
			t.Errorf("a %q connection: %v", typ, err)
		}
	}
}

// Without a connection and without default credentials the error names
// the connection type to create, before any network call.
func TestNoCredentialsSaysWhichConnectionToCreate(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	for _, v := range []string{"GOOGLE_APPLICATION_CREDENTIALS", "GCE_METADATA_HOST", "STORAGE_EMULATOR_HOST"} {
		t.Setenv(v, "")
	}
	if err := (storagetest.Area{}).Handle(t, storage.Options{}).Check(context.Background(), storagetest.Parse(t, "gs://b/k"), false); err == nil || !strings.Contains(err.Error(), "create a google_cloud_platform connection") {
		t.Errorf("Check: got %v", err)
	}
}

package s3_test

import (
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

// s3:// and Hadoop's s3a:// name the store; aws and s3 connections (and an
// untyped one) reach it.
func TestURLsAndConnectionTypes(t *testing.T) {
	loc, err := storage.Default.Parse("s3a://aws_prod@bucket/k")
	if err != nil || loc.Scheme != "s3" || loc.Bucket != "bucket" || loc.Key != "k" || loc.ConnID != "aws_prod" || loc.String() != "s3a://bucket/k" {
		t.Errorf("ParseURL: %+v (%s), %v", loc, loc, err)
	}
	if _, err := storage.Default.Parse("s3://AKIA:secret@bucket/k"); err == nil || !strings.Contains(err.Error(), "put them in an aws connection") {
		t.Errorf("credentials in the URL: %v", err)
	}
	for _, typ := range []string{"aws", "s3", ""} {
		if _, err := storage.Default.FromConnection("s3", connections.Connection{ConnID: "c", ConnType: typ}); err != nil {
			t.Errorf("a %q connection: %v", typ, err)
		}
	}
}

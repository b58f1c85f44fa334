package storage_test

import (
	"context"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
	"github.com/airflow-sandbox/airflow-go-worker/storage/gcs"
	"github.com/airflow-sandbox/airflow-go-worker/storage/s3"
)

// TestFromConnectionChecksTheType: each store accepts the connection
// types its driver registered (and an untyped connection), and a
// connection of another type is named with the type to create.
func TestFromConnectionChecksTheType(t *testing.T) {
	for _, tt := range []struct {
		scheme   string
		connType string
		err      string
	}{
		{"s3", "aws", ""},
		{"s3", "", ""},
		{"gs", "google_cloud_platform", ""},
		{"gs", "gcp", ""},
		{"az", "wasb", ""},
		{"gs", "aws", `connection "c" has type "aws", not google_cloud_platform; gs://, gcs:// URLs need a google_cloud_platform connection`},
		{"az", "google_cloud_platform", `has type "google_cloud_platform", not wasb`},
		{"s3", "wasb", `has type "wasb", not aws`},
	} {
		conn := connections.Connection{ConnID: "c", ConnType: tt.connType}
		if tt.scheme == "az" {
			conn.Login, conn.Password = "acct", "S0VZ"
		}
		_, err := storage.FromConnection(tt.scheme, conn)
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%s with a %q connection: got %v, want %q", tt.scheme, tt.connType, err, tt.err)
		}
	}
	if got := storage.ConnType("gs"); got != "google_cloud_platform" {
		t.Errorf("ConnType(gs) = %q", got)
	}
}

// TestCredentialsOfAnotherStoreAreRefused: a driver given credentials
// parsed for another store says so instead of using them.
func TestCredentialsOfAnotherStoreAreRefused(t *testing.T) {
	aws := &s3.AWSConfig{AccessKeyID: "a", SecretAccessKey: "s"}
	opt := storage.Options{Credentials: map[string]storage.Credentials{"gs": aws}}
	err := storage.Check(context.Background(), "gs://b/k", false, opt)
	if err == nil || !strings.Contains(err.Error(), "*s3.AWSConfig, not the *gcs.Config") {
		t.Fatalf("got %v", err)
	}
	if _, err := storage.CredentialsFor[*gcs.Config](opt, "s3"); err != nil {
		t.Fatalf("no gs credentials is not an error: %v", err)
	}
}

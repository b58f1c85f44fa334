package storage_test

import (
	"context"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
	"github.com/airflow-sandbox/airflow-go-worker/testing/dirstore"
)

// TestFromConnectionChecksTheType: a store accepts the connection types
// its driver registered (and an untyped connection), and a connection of
// another type is named with the type to create, before the store's
// adapter reads it; a store without connections takes none.
func TestFromConnectionChecksTheType(t *testing.T) {
	for _, tt := range []struct {
		scheme, connType, err string
	}{
		{"dir", "dirstore", ""},
		{"dir", "", ""},
		{"dir", "aws", `connection "c" has type "aws", not dirstore; dir:// URLs need a dirstore connection`},
		{"file", "fs", `file:// URLs take no connection; remove the connection "c"`},
		{"nope", "aws", `no store "nope" is linked into this binary (it links dir, file)`},
	} {
		_, err := storage.Default.FromConnection(tt.scheme, connections.Connection{ConnID: "c", ConnType: tt.connType, Host: "/srv/buckets"})
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%s with a %q connection: got %v, want %q", tt.scheme, tt.connType, err, tt.err)
		}
	}
	if got := storage.Default.ConnType("dir"); got != "dirstore" {
		t.Errorf("ConnType(dir) = %q", got)
	}
}

type otherCreds struct{}

func (otherCreds) Secrets() map[string]string { return nil }

// TestCredentialsOfAnotherStoreAreRefused: a driver given credentials
// parsed for another store says so instead of using them.
func TestCredentialsOfAnotherStoreAreRefused(t *testing.T) {
	loc, err := storage.Default.Parse("dir://b/k")
	if err != nil {
		t.Fatal(err)
	}
	h := storage.Default.NewHandle(storage.Options{})
	defer h.Close()
	h.Connect("dir", "", otherCreds{})
	err = h.Check(context.Background(), loc, false)
	if err == nil || !strings.Contains(err.Error(), "storage_test.otherCreds, not the *dirstore.Config") {
		t.Fatalf("got %v", err)
	}
	if c, err := storage.CredentialsAs[*dirstore.Config](nil); err != nil || c != nil {
		t.Fatalf("no credentials (the store's default ones) is not an error: %v, %v", c, err)
	}
}

package azure_test

import (
	"context"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
	"github.com/airflow-sandbox/airflow-go-worker/testing/storagetest"
)

// The Azure store reads its own URLs: four spellings, a connection or
// adlfs's account host before the container, and Hadoop's and Gen1's
// spellings refused with what to write instead.
func TestURLs(t *testing.T) {
	for in, want := range map[string]struct{ bucket, conn string }{
		"abfs://container/dir/x.bin":                     {"container", ""},
		"abfss://wasb_prod@container/k":                  {"container", "wasb_prod"},
		"az://container/k":                               {"container", ""},
		"azblob://container/k":                           {"container", ""},
		"abfs://container@myacct.dfs.core.windows.net/k": {"container@myacct.dfs.core.windows.net", ""},
	} {
		loc, err := storage.Default.Parse(in)
		if err != nil || loc.Scheme != "az" || loc.Bucket != want.bucket || loc.ConnID != want.conn {
			t.Errorf("ParseURL(%q) = %+v, %v; want bucket %q, connection %q", in, loc, err, want.bucket, want.conn)
		}
		if err == nil && strings.TrimPrefix(in, "abfss://wasb_prod@") == in && loc.String() != in {
			t.Errorf("%q prints as %q", in, loc.String())
		}
	}
	for in, want := range map[string]string{
		"wasb://container@acct.blob.core.windows.net/k": "wasb:// is Hadoop's form, whose user part is the container; write abfs://container/key",
		"wasbs://container/k":                           "wasbs:// is Hadoop's form",
		"adl://store/k":                                 "retired",
		"abfs://acct.dfs.core.windows.net/k":            "names an account host but no container; write it as abfs://container@acct.dfs.core.windows.net/key",
		"abfs:///key":                                   "has no container; write it as abfs://container/key",
		"abfs://name:secret@container/k":                "put them in a wasb connection",
	} {
		if _, err := storage.Default.Parse(in); err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "secret@") {
			t.Errorf("ParseURL(%q): want %q, got %v", in, want, err)
		}
	}
	if _, err := storage.Default.FromConnection("az", connections.Connection{ConnID: "c", ConnType: "wasb", Login: "acct", Password: "S0VZ"}); err != nil {
		t.Errorf("a wasb connection: %v", err)
	}
}

// Without a connection and without AZURE_STORAGE_* the error names the
// connection type to create, before any network call.
func TestNoCredentialsSaysWhichConnectionToCreate(t *testing.T) {
	for _, v := range []string{"AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_KEY", "AZURE_STORAGE_ACCOUNT_KEY"} {
		t.Setenv(v, "")
	}
	for _, u := range []string{"abfs://c/k", "azblob://c/k"} {
		if err := (storagetest.Area{}).Handle(t, storage.Options{}).Check(context.Background(), storagetest.Parse(t, u), false); err == nil || !strings.Contains(err.Error(), "create a wasb connection") {
			t.Errorf("Check %s: got %v", u, err)
		}
	}
}

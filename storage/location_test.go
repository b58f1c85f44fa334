package storage

import (
	"context"
	"maps"
	"strings"
	"testing"
)

func TestParseURL(t *testing.T) {
	ok := []struct {
		in   string
		want Location
	}{
		{"s3://bucket/key", Location{Scheme: "s3", Bucket: "bucket", Key: "key", form: "s3"}},
		{"s3://bucket/a/b/c.parquet", Location{Scheme: "s3", Bucket: "bucket", Key: "a/b/c.parquet", form: "s3"}},
		{"S3://bucket/a%20b", Location{Scheme: "s3", Bucket: "bucket", Key: "a b", form: "s3"}},
		{"s3a://bucket/k", Location{Scheme: "s3", Bucket: "bucket", Key: "k", form: "s3a"}},
		{"s3://aws_prod@bucket/k", Location{Scheme: "s3", Bucket: "bucket", Key: "k", ConnID: "aws_prod", form: "s3"}},
		{"gs://bucket/a/b", Location{Scheme: "gs", Bucket: "bucket", Key: "a/b", form: "gs"}},
		{"gcs://gcp_prod@bucket/k", Location{Scheme: "gs", Bucket: "bucket", Key: "k", ConnID: "gcp_prod", form: "gcs"}},
		{"abfs://container/dir/x.bin", Location{Scheme: "az", Bucket: "container", Key: "dir/x.bin", form: "abfs"}},
		{"abfss://wasb_prod@container/k", Location{Scheme: "az", Bucket: "container", Key: "k", ConnID: "wasb_prod", form: "abfss"}},
		{"az://container/k", Location{Scheme: "az", Bucket: "container", Key: "k", form: "az"}},
		{"azblob://container/k", Location{Scheme: "az", Bucket: "container", Key: "k", form: "azblob"}},
		{"abfs://container@myacct.dfs.core.windows.net/k", Location{Scheme: "az", Bucket: "container", Account: "myacct.dfs.core.windows.net", Key: "k", form: "abfs"}},
		{"file:///tmp/out/x.bin", Location{Scheme: "file", Key: "tmp/out/x.bin", form: "file"}},
		{"file://localhost/tmp/x", Location{Scheme: "file", Key: "tmp/x", form: "file"}},
	}
	for _, tt := range ok {
		got, err := parseURL(tt.in)
		if err != nil {
			t.Errorf("parseURL(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("parseURL(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}

	bad := []struct{ in, want string }{
		{"https://b/k", "unsupported scheme https://"},
		{"wasb://container@acct.blob.core.windows.net/k", "write abfs://container/key"},
		{"adl://store/k", "retired"},
		{"abfs://acct.dfs.core.windows.net/k", "no container"},
		{"gs://bucket:443/k", "has a port"},
		{"gs:///key", "no bucket"},
		{"abfs:///key", "no container"},
		{"gs://AKIA:secret@bucket/k", "google_cloud_platform connection"},
		{"abfs://name:secret@container/k", "wasb connection"},
		{"/tmp/x", "not a storage URL"},
		{"s3:///key", "no bucket"},
		{"s3://bucket", "no object key"},
		{"s3://bucket/", "no object key"},
		{"s3://bucket/dir/", "names a directory"},
		{"s3://bucket/a//b", "empty, . or .."},
		{"s3://bucket/a/../b", "empty, . or .."},
		{"s3://bucket/k?versionId=1", "query"},
		{"s3://bucket/a__0x41__", "__0x"},
		{"s3://bucket/a%01b", "control character"},
		{"s3://AKIA:secret@bucket/k", "credentials in the URL"},
		{"file://otherhost/tmp/x", "must be local"},
		{"file:relative/x", "not an absolute file URL"},
		{"file:///tmp/dir/", "names a directory"},
		{"file:///tmp/x.attrs", ".attrs"},
		{"file:///tmp/a/../b", "empty, . or .."},
		{"file:///data/reports/../../etc/x", "empty, . or .."},
		{"file:///tmp/./b", "empty, . or .."},
		{"file:///tmp//b", "empty, . or .."},
		{"file:///", "names a directory"},
	}
	for _, tt := range bad {
		_, err := parseURL(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("parseURL(%q): want error containing %q, got %v", tt.in, tt.want, err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("parseURL(%q) leaks the secret: %v", tt.in, err)
		}
	}
}

func TestLocationString(t *testing.T) {
	for _, in := range []string{"s3://b/k/x", "file:///tmp/x", "gs://b/k", "abfs://c/k", "az://c/k", "azblob://c/k", "abfs://c@acct.dfs.core.windows.net/k"} {
		l, err := parseURL(in)
		if err != nil {
			t.Fatal(err)
		}
		if l.String() != in {
			t.Errorf("%q round-trips to %q", in, l.String())
		}
	}
}

func TestRedactURL(t *testing.T) {
	tests := []struct{ in, mustNot, must string }{
		{"s3://AKIA:supersecret@bucket/k", "supersecret", "AKIA"},
		{"https://h/p?X-Amz-Signature=abc123sig&X-Amz-Credential=cred9&part=1", "abc123sig", "part=1"},
		{"https://h/p?token=tok777", "tok777", "h/p"},
		{"s3://b/plain/key", "", "s3://b/plain/key"},
		{"::not a url secret", "secret", "unparseable"},
	}
	for _, tt := range tests {
		got := redactURL(tt.in)
		if tt.mustNot != "" && strings.Contains(got, tt.mustNot) {
			t.Errorf("redactURL(%q) = %q still contains %q", tt.in, got, tt.mustNot)
		}
		if !strings.Contains(got, tt.must) {
			t.Errorf("redactURL(%q) = %q lost %q", tt.in, got, tt.must)
		}
	}
}

// withoutDrivers unregisters the optional stores for the rest of the test,
// as in a bundle that imports none of their packages (this test binary
// links them all, for the external tests).
func withoutDrivers(t *testing.T) {
	driversMu.Lock()
	saved := map[string]Driver{}
	for k := range wellKnown {
		if d, ok := drivers[k]; ok {
			saved[k] = d
		}
		delete(drivers, k)
	}
	driversMu.Unlock()
	t.Cleanup(func() {
		driversMu.Lock()
		defer driversMu.Unlock()
		maps.Copy(drivers, saved)
	})
}

// TestDriverNotLinked: a bundle that does not import storage/s3,
// storage/gcs or storage/azure is told which package to link.
func TestDriverNotLinked(t *testing.T) {
	withoutDrivers(t)
	for u, pkg := range map[string]string{"s3://b/k": "storage/s3", "s3a://b/k": "storage/s3", "gs://b/k": "storage/gcs", "abfs://c/k": "storage/azure", "azblob://c/k": "storage/azure"} {
		_, err := Put(context.Background(), u, strings.NewReader("x"), Options{})
		if err == nil || !strings.Contains(err.Error(), pkg) || !strings.Contains(err.Error(), "does not link") {
			t.Errorf("Put %s: want an error naming %s, got %v", u, pkg, err)
		}
		if err2 := RequireLinked(u); err2 == nil || !strings.HasSuffix(err.Error(), err2.Error()) {
			t.Errorf("RequireLinked %s: %v, want the error Put gave (%v)", u, err2, err)
		}
	}
	for _, u := range []string{"file:///x", "nonsense", "ftp://h/k"} {
		if err := RequireLinked(u); err != nil {
			t.Errorf("RequireLinked %s: %v; only a known store this binary lacks is its business", u, err)
		}
	}
	if got := strings.Join(Schemes(), ","); got != "file" {
		t.Errorf("Schemes without the optional drivers: %s", got)
	}
	SetUnlinkedHint(func(scheme string) string {
		if scheme == "gs" {
			return "build with -tags store_gcs"
		}
		return ""
	})
	t.Cleanup(func() { SetUnlinkedHint(nil) })
	if err := RequireLinked("gcs://b/k"); err == nil || !strings.Contains(err.Error(), "gcs:// URLs need the gcs store, which is not linked into this binary (it links file); build with -tags store_gcs") {
		t.Errorf("with a hint: %v", err)
	}
	if err := RequireLinked("abfs://c/k"); err == nil || !strings.Contains(err.Error(), "storage/azure") {
		t.Errorf("a store the hint does not know keeps the generic advice: %v", err)
	}
}

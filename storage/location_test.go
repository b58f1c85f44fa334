package storage

import (
	"strings"
	"testing"
)

func TestParseURL(t *testing.T) {
	ok := []struct {
		in   string
		want location
	}{
		{"s3://bucket/key", location{scheme: "s3", bucket: "bucket", key: "key"}},
		{"s3://bucket/a/b/c.parquet", location{scheme: "s3", bucket: "bucket", key: "a/b/c.parquet"}},
		{"S3://bucket/a%20b", location{scheme: "s3", bucket: "bucket", key: "a b"}},
		{"s3a://bucket/k", location{scheme: "s3", bucket: "bucket", key: "k"}},
		{"s3://aws_prod@bucket/k", location{scheme: "s3", bucket: "bucket", key: "k", connID: "aws_prod"}},
		{"file:///tmp/out/x.bin", location{scheme: "file", key: "tmp/out/x.bin"}},
		{"file://localhost/tmp/x", location{scheme: "file", key: "tmp/x"}},
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
		{"gs://b/k", "unsupported scheme gs://"},
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
	for _, in := range []string{"s3://b/k/x", "file:///tmp/x"} {
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

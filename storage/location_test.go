package storage

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
)

// TestParseURL: a URL's scheme chooses the store's driver, which reads the
// rest (here file:// and the mem store, a bucket store registered as a
// store package registers itself, reading its URLs as most stores do);
// the key is then held to what every store keeps verbatim.
func TestParseURL(t *testing.T) {
	reg := memRegistry(nil)
	ok := []struct {
		in   string
		want Location
	}{
		{"mem://bucket/key", Location{Scheme: "mem", Bucket: "bucket", Key: "key", form: "mem", kind: objectKey}},
		{"mem://bucket/a/b/c.parquet", Location{Scheme: "mem", Bucket: "bucket", Key: "a/b/c.parquet", form: "mem", kind: objectKey}},
		{"MEM://bucket/a%20b", Location{Scheme: "mem", Bucket: "bucket", Key: "a b", form: "mem", kind: objectKey}},
		{"memory://bucket/k", Location{Scheme: "mem", Bucket: "bucket", Key: "k", form: "memory", kind: objectKey}},
		{"mem://mem_prod@bucket/k", Location{Scheme: "mem", Bucket: "bucket", Key: "k", ConnID: "mem_prod", form: "mem", kind: objectKey}},
		// What a dependency that is gone reserved is an ordinary key now.
		{"mem://bucket/a__0x41__", Location{Scheme: "mem", Bucket: "bucket", Key: "a__0x41__", form: "mem", kind: objectKey}},
		{"file:///tmp/out/x.bin", Location{Scheme: "file", Key: "tmp/out/x.bin", form: "file", kind: objectKey}},
		{"file://localhost/tmp/x", Location{Scheme: "file", Key: "tmp/x", form: "file", kind: objectKey}},
		{"file:///tmp/x.attrs", Location{Scheme: "file", Key: "tmp/x.attrs", form: "file", kind: objectKey}},
	}
	for _, tt := range ok {
		got, err := reg.Parse(tt.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("Parse(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}

	bad := []struct{ in, want string }{
		{"https://b/k", "no store this bundle links reads https:// URLs (supported here: "},
		{"https://b/k", "mem://bucket/key (also memory://)"},
		{"mem://bucket:443/k", "has a port"},
		{"mem:///key", "has no bucket; write it as mem://bucket/key"},
		{"memory://AKIA:secret@bucket/k", "carries credentials in the URL; put them in a memstore connection"},
		{"/tmp/x", "is not a storage URL; supported here: "},
		{"mem://bucket", "no object key"},
		{"mem://bucket/", "no object key"},
		{"mem://bucket/dir/", "names a directory"},
		{"mem://bucket/a//b", "empty, . or .."},
		{"mem://bucket/a/../b", "empty, . or .."},
		{"mem://bucket/k?versionId=1", "query"},
		{"mem://bucket/a%01b", "control character"},
		{"file://otherhost/tmp/x", "must be local"},
		{"file:relative/x", "not an absolute file URL"},
		{"file:///tmp/dir/", "names a directory"},
		{"file:///tmp/a/../b", "empty, . or .."},
		{"file:///data/reports/../../etc/x", "empty, . or .."},
		{"file:///tmp/./b", "empty, . or .."},
		{"file:///tmp//b", "empty, . or .."},
		{"file:///", "no object key or file name"},
	}
	for _, tt := range bad {
		_, err := reg.Parse(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q): want error containing %q, got %v", tt.in, tt.want, err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("Parse(%q) leaks the secret: %v", tt.in, err)
		}
		if err != nil && !final.Is(err) {
			t.Errorf("Parse(%q): a URL that does not parse is final: %v", tt.in, err)
		}
	}
}

// A store's driver may read its URLs its own way (ParseURL) and refuse
// spellings users reach for (Refuse), with nothing in this package naming
// it; its URLs print in the spelling they were written in.
func TestStoreParsesItsOwnURLs(t *testing.T) {
	reg := NewRegistry()
	reg.Register(Registration{
		Scheme: "vault", Forms: []string{"vault", "vlt"}, Example: "vault://shelf/key",
		ParseURL: func(u *url.URL) (Location, error) {
			if u.Host != "shelf" {
				return Location{}, fmt.Errorf("names shelf %q; this vault has one shelf, called shelf", u.Host)
			}
			return Location{Bucket: "shelf", Key: strings.TrimPrefix(u.Path, "/")}, nil
		},
		Refuse: map[string]string{"safe": "safe:// was the old name; write vault://shelf/key"},
		Open:   func(context.Context, string, Credentials) (Driver, error) { return nil, errors.New("not opened") },
	})
	loc, err := reg.Parse("vlt://shelf/a/b")
	if err != nil || loc != (Location{Scheme: "vault", Bucket: "shelf", Key: "a/b", form: "vlt", kind: objectKey}) || loc.String() != "vlt://shelf/a/b" {
		t.Fatalf("Parse: %+v (%s), %v", loc, loc, err)
	}
	for in, want := range map[string]string{
		"vault://attic/k":   `"vault://attic/k" names shelf "attic"; this vault has one shelf`,
		"vault://shelf/a/.": "empty, . or ..",
		"safe://shelf/k":    `safe:// was the old name; write vault://shelf/key`,
	} {
		if _, err := reg.Parse(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q): want %q, got %v", in, want, err)
		}
	}
	if got := reg.SupportedURLs(); !strings.Contains(got, "vault://shelf/key (also vlt://)") {
		t.Errorf("SupportedURLs must list the registered store: %s", got)
	}
	for _, d := range []Registration{
		{Scheme: "vault2", Forms: []string{"vlt"}, Open: fileRegistration.Open},
		{Scheme: "vault3", Refuse: map[string]string{"vault": "taken"}, Open: fileRegistration.Open},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("registering %s, which claims a URL scheme another store has, must panic", d.Scheme)
				}
			}()
			reg.Register(d)
		}()
	}
}

func TestLocationString(t *testing.T) {
	reg := memRegistry(nil)
	for _, in := range []string{"mem://b/k/x", "memory://b/k", "file:///tmp/x", "mem://b/run/manual__2026-12-01T00:00:00+00:00/a%20b"} {
		l, err := reg.Parse(in)
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

// TestStoreNotLinked: a URL of a store this binary does not link is told
// what this one reads, and, where the binary knows the store (the standard
// binary's extras, SetUnlinkedHint), how to build one that links it.
func TestStoreNotLinked(t *testing.T) {
	_, err := Default.Parse("s3a://b/k")
	if err == nil || !strings.Contains(err.Error(), "no store this bundle links reads s3a:// URLs (supported here: ") || !strings.Contains(err.Error(), "import") || !final.Is(err) {
		t.Errorf("Parse: %v", err)
	}
	if err2 := Default.RequireLinked("s3a://b/k"); err2 == nil || !strings.HasSuffix(err.Error(), err2.Error()) {
		t.Errorf("RequireLinked: %v, want the error Parse gave (%v)", err2, err)
	}
	for _, u := range []string{"file:///x", "nonsense", "file:///relative/../x"} {
		if err := Default.RequireLinked(u); err != nil {
			t.Errorf("RequireLinked %s: %v; only a URL no linked store reads is its business", u, err)
		}
	}
	// The test binary links file:// and, through the external tests,
	// testing/dirstore.
	if got := strings.Join(Default.Names(), ","); got != "dir,file" {
		t.Errorf("Names: %s", got)
	}
	Default.SetUnlinkedHint(func(form string) (string, string) {
		if form == "gcs" {
			return "gcs", "build with -tags store_gcs"
		}
		return "", ""
	})
	t.Cleanup(func() { Default.SetUnlinkedHint(nil) })
	if err := Default.RequireLinked("gcs://b/k"); err == nil || !strings.Contains(err.Error(), "gcs:// URLs need the gcs store, which is not linked into this binary (it links dir, file); build with -tags store_gcs") || !final.Is(err) {
		t.Errorf("with a hint: %v", err)
	}
	if err := Default.RequireLinked("abfs://c/k"); err == nil || !strings.Contains(err.Error(), "no store this bundle links reads abfs:// URLs") {
		t.Errorf("a scheme the hint does not know keeps the generic advice: %v", err)
	}
}

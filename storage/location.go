package storage

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
)

// Location is a parsed storage URL. Drivers receive it to open the bucket it
// lives in.
type Location struct {
	// Scheme is the store: "s3", "gs", "az" (Azure Blob) or "file".
	Scheme string
	// Bucket is the bucket (S3, GCS) or container (Azure); empty for file.
	Bucket string
	// Account is the Azure storage account host when the URL names it
	// (abfs://container@account.dfs.core.windows.net/key); otherwise the
	// account comes from the connection.
	Account string
	// Key is the object key; for file, the absolute path without its
	// leading "/".
	Key string
	// ConnID is the Airflow connection the URL names (scheme://conn_id@bucket/key,
	// as Airflow's ObjectStoragePath reads it).
	ConnID string

	form string // the scheme as written, for Azure's several spellings
}

// String is the canonical URL: s3://bucket/key, gs://bucket/key,
// abfs://container/key (in the spelling the URL used) or file:///path. It
// never carries the connection id.
// The key is path-escaped segment by segment, so the URL parses back to
// the same key even when it holds "%", "?", "#" or a space (a custom run
// id filled into {run_id}).
func (l Location) String() string {
	key := escapeKey(l.Key)
	switch l.Scheme {
	case "file":
		return "file:///" + key
	case "az":
		host := l.Bucket
		if l.Account != "" {
			host = l.Bucket + "@" + l.Account
		}
		return l.form + "://" + host + "/" + key
	}
	return l.Scheme + "://" + l.Bucket + "/" + key
}

func escapeKey(key string) string {
	segs := strings.Split(key, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// storeID identifies the bucket (or filesystem) a location lives in, so an
// Export opens each one once.
func (l Location) storeID() string {
	if l.Scheme == "file" {
		return "file"
	}
	return l.Scheme + "://" + l.Account + "/" + l.Bucket
}

// SupportedURLs lists the URL forms, for error messages.
const SupportedURLs = "supported: s3://bucket/key, gs://bucket/key, abfs://container/key (also az://, abfss://, azblob://), file:///absolute/path; " +
	"a connection may be named before the bucket, as in s3://conn_id@bucket/key"

// schemes maps every accepted spelling to its store.
var schemes = map[string]string{
	"s3": "s3", "s3a": "s3",
	"gs": "gs", "gcs": "gs",
	"abfs": "az", "abfss": "az", "az": "az", "azblob": "az",
	"file": "file",
}

// refusedSchemes are spellings users reach for that name a store in a way
// this package cannot honour, with what to write instead.
var refusedSchemes = map[string]string{
	"wasb":  "wasb:// is Hadoop's form, whose user part is the container; write abfs://container/key (the account comes from the wasb connection) or abfs://container@account.dfs.core.windows.net/key",
	"wasbs": "wasbs:// is Hadoop's form, whose user part is the container; write abfs://container/key (the account comes from the wasb connection) or abfs://container@account.dfs.core.windows.net/key",
	"adl":   "adl:// is Azure Data Lake Gen1, which Azure retired; write abfs://container/key for Blob storage",
}

// ParseURL checks a storage URL and explains what is wrong with it.
func ParseURL(raw string) (Location, error) { return parseURL(raw) }

// parseURL checks a destination or source URL and explains what is wrong
// with it; its errors are final, as the URL will not change.
func parseURL(raw string) (Location, error) {
	loc, err := parseLocation(raw)
	return loc, final.Mark(err)
}

// parseLocation is parseURL's work. Keys are restricted to what every
// backend stores verbatim (gocloud would otherwise silently escape some
// characters, so a key written one way could be read back under another
// name).
func parseLocation(raw string) (Location, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Location{}, fmt.Errorf("%q is not a valid URL (%v); %s", redactURL(raw), err, SupportedURLs)
	}
	form := strings.ToLower(u.Scheme)
	loc := Location{Scheme: schemes[form], form: form}
	if loc.Scheme == "" {
		// A store of its own package, registered with its URL forms.
		loc.Scheme = registeredForm(form)
	}
	switch loc.Scheme {
	case "":
		if form == "" {
			return Location{}, fmt.Errorf("%q is not a storage URL such as s3://bucket/key or file:///path", redactURL(raw))
		}
		if why, ok := refusedSchemes[form]; ok {
			return Location{}, fmt.Errorf("%q: %s", redactURL(raw), why)
		}
		return Location{}, fmt.Errorf("unsupported scheme %s:// in %q; %s", form, redactURL(raw), SupportedURLs)
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return Location{}, fmt.Errorf("%q names host %q; file URLs must be local, like file:///absolute/path", raw, u.Host)
		}
		if u.Opaque != "" || !strings.HasPrefix(u.Path, "/") {
			return Location{}, fmt.Errorf("%q is not an absolute file URL; write it as file:///absolute/path", raw)
		}
		if u.RawQuery != "" || u.Fragment != "" {
			return Location{}, fmt.Errorf("%q has a query or fragment; remove the part after ? or #", raw)
		}
		if strings.HasSuffix(u.Path, "/") {
			return Location{}, fmt.Errorf("%q ends with /, so it names a directory; give a file name", raw)
		}
		// Not path.Clean: "a/../b" would silently write elsewhere than the
		// URL reads, and with {run_id} filled in from a Dag run it could climb
		// out of the directory the author chose. checkKey refuses . and ..
		// segments, as it does for S3 keys.
		loc.Key = strings.TrimPrefix(u.Path, "/")
		if strings.HasSuffix(loc.Key, ".attrs") {
			// fileblob reserves this suffix for its metadata sidecars.
			return Location{}, fmt.Errorf("%q ends with .attrs, a suffix the file backend reserves; choose another file name", raw)
		}
	default: // a bucket store: s3, gs, az or a registered one
		if err := parseBucketURL(&loc, u, raw); err != nil {
			return Location{}, err
		}
	}
	if err := checkKey(loc.Key); err != nil {
		return Location{}, fmt.Errorf("%q: %v", redactURL(raw), err)
	}
	return loc, nil
}

// parseBucketURL reads scheme://[conn_id@]bucket/key. For Azure it also
// takes adlfs's scheme://container@account.dfs.core.windows.net/key: a host
// with a dot cannot be a container (container names have none), so there
// the user part is the container, not a connection.
func parseBucketURL(loc *Location, u *url.URL, raw string) error {
	shown := redactURL(raw)
	loc.Bucket = u.Host
	if u.User != nil {
		if _, hasPassword := u.User.Password(); hasPassword {
			return fmt.Errorf("%q carries credentials in the URL; put them in a %s connection instead", shown, ConnType(loc.Scheme))
		}
		loc.ConnID = u.User.Username()
	}
	if u.Port() != "" {
		return fmt.Errorf("%q has a port; a storage URL names a bucket, not a server: put the endpoint in the %s connection", shown, ConnType(loc.Scheme))
	}
	if loc.Scheme == "az" && strings.Contains(loc.Bucket, ".") {
		if loc.ConnID == "" {
			return fmt.Errorf("%q names an account host but no container; write it as %s://container@%s/key or %s://container/key", shown, loc.form, loc.Bucket, loc.form)
		}
		loc.Account, loc.Bucket, loc.ConnID = loc.Bucket, loc.ConnID, ""
	}
	if loc.Bucket == "" {
		return fmt.Errorf("%q has no %s; write it as %s://%s/key", shown, bucketWord(loc.Scheme), loc.form, bucketWord(loc.Scheme))
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%q has a query or fragment, which object keys cannot carry here; remove the part after ? or #", shown)
	}
	loc.Key = strings.TrimPrefix(u.Path, "/")
	return nil
}

func bucketWord(scheme string) string {
	if scheme == "az" {
		return "container"
	}
	return "bucket"
}

func checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("no object key or file name; add one after the bucket or directory")
	}
	if strings.HasSuffix(key, "/") {
		return fmt.Errorf("ends with /, so it names a directory, not an object; give a file name")
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("contains an empty, . or .. path segment; write the key without them")
		}
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("contains a control character; rename the object")
		}
	}
	if strings.Contains(key, "__0x") {
		return fmt.Errorf(`contains "__0x", which the storage library treats as an escape sequence; rename the object`)
	}
	return nil
}

// sensitiveQueryWords mark query parameters whose values must not be logged
// (pre-signed URLs, tokens).
var sensitiveQueryWords = []string{"secret", "token", "password", "signature", "credential", "key", "sig"}

// RedactURL hides a password in the userinfo and the values of query
// parameters that look like credentials (a SAS token's sig=), so URLs can
// be logged and put in errors.
func RedactURL(raw string) string { return redactURL(raw) }

func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		// Unparseable: keep only the scheme so nothing secret leaks.
		if i := strings.Index(raw, "://"); i >= 0 {
			return raw[:i+3] + "<unparseable>"
		}
		return "<unparseable URL>"
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			lk := strings.ToLower(k)
			for _, w := range sensitiveQueryWords {
				if strings.Contains(lk, w) {
					q[k] = []string{"xxxxx"}
					break
				}
			}
		}
		u.RawQuery = q.Encode()
	}
	return u.String()
}

package storage

import (
	"fmt"
	"net/url"
	"strings"
)

// location is a parsed storage URL.
type location struct {
	scheme string // "s3" or "file"
	bucket string // s3 only
	key    string // s3: object key; file: absolute path without the leading "/"
	connID string // s3://conn_id@bucket/key names an Airflow connection
}

// String is the canonical URL: s3://bucket/key or file:///path.
func (l location) String() string {
	if l.scheme == "file" {
		return "file:///" + l.key
	}
	return "s3://" + l.bucket + "/" + l.key
}

// withKey is the same place with another key (for partials).
func (l location) withKey(key string) location { l.key = key; return l }

// storeID identifies the bucket (or filesystem) a location lives in, so an
// Export opens each one once.
func (l location) storeID() string {
	if l.scheme == "file" {
		return "file"
	}
	return "s3://" + l.bucket
}

const supportedSchemes = "supported: s3://bucket/key, file:///absolute/path"

// parseURL checks a destination or source URL and explains what is wrong
// with it. Keys are restricted to what every backend stores verbatim (gocloud
// would otherwise silently escape some characters, so a key written one way
// could be read back under another name).
func parseURL(raw string) (location, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return location{}, fmt.Errorf("%q is not a valid URL (%v); %s", redactURL(raw), err, supportedSchemes)
	}
	var loc location
	switch strings.ToLower(u.Scheme) {
	case "s3", "s3a":
		loc.scheme = "s3"
		loc.bucket = u.Host
		if u.User != nil {
			if _, hasPassword := u.User.Password(); hasPassword {
				return location{}, fmt.Errorf("%q carries credentials in the URL; put them in an aws connection instead", redactURL(raw))
			}
			loc.connID = u.User.Username()
		}
		if loc.bucket == "" {
			return location{}, fmt.Errorf("%q has no bucket; write it as s3://bucket/key", redactURL(raw))
		}
		if u.RawQuery != "" || u.Fragment != "" {
			return location{}, fmt.Errorf("%q has a query or fragment, which S3 keys cannot carry here; remove the part after ? or #", redactURL(raw))
		}
		loc.key = strings.TrimPrefix(u.Path, "/")
	case "file":
		loc.scheme = "file"
		if u.Host != "" && u.Host != "localhost" {
			return location{}, fmt.Errorf("%q names host %q; file URLs must be local, like file:///absolute/path", raw, u.Host)
		}
		if u.Opaque != "" || !strings.HasPrefix(u.Path, "/") {
			return location{}, fmt.Errorf("%q is not an absolute file URL; write it as file:///absolute/path", raw)
		}
		if u.RawQuery != "" || u.Fragment != "" {
			return location{}, fmt.Errorf("%q has a query or fragment; remove the part after ? or #", raw)
		}
		if strings.HasSuffix(u.Path, "/") {
			return location{}, fmt.Errorf("%q ends with /, so it names a directory; give a file name", raw)
		}
		// Not path.Clean: "a/../b" would silently write elsewhere than the
		// URL reads, and with {run_id} filled in from a Dag run it could climb
		// out of the directory the author chose. checkKey refuses . and ..
		// segments, as it does for S3 keys.
		loc.key = strings.TrimPrefix(u.Path, "/")
		if strings.HasSuffix(loc.key, ".attrs") {
			// fileblob reserves this suffix for its metadata sidecars.
			return location{}, fmt.Errorf("%q ends with .attrs, a suffix the file backend reserves; choose another file name", raw)
		}
	case "":
		return location{}, fmt.Errorf("%q is not a storage URL such as s3://bucket/key or file:///path", redactURL(raw))
	default:
		return location{}, fmt.Errorf("unsupported scheme %s:// in %q; %s", strings.ToLower(u.Scheme), redactURL(raw), supportedSchemes)
	}
	if err := checkKey(loc.key); err != nil {
		return location{}, fmt.Errorf("%q: %v", redactURL(raw), err)
	}
	return loc, nil
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

// redactURL hides a password in the userinfo and the values of query
// parameters that look like credentials, so URLs can be logged and put in
// errors.
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

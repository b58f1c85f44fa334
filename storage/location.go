package storage

import (
	"fmt"
	"net/url"
	"strings"
)

// Location is a parsed storage URL (Registry.Parse). Each store's driver
// reads its own URLs (Registration.ParseURL, by default ParseBucketURL's
// scheme://[conn_id@]bucket/key); this package only finds the driver by the
// URL's scheme and checks the key.
type Location struct {
	// Scheme is the store: its Registration.Scheme ("s3", "gs", "file").
	Scheme string
	// Bucket is what the driver opens: a bucket or container, in whatever
	// form its driver needs (storage/azure's is container@account-host
	// when the URL names the account); empty for file.
	Bucket string
	// Key is the object key; for file, the absolute path without its
	// leading "/".
	Key string
	// ConnID is the Airflow connection the location is reached with: the
	// one the URL names (scheme://conn_id@bucket/key, as Airflow's
	// ObjectStoragePath reads it), or one its caller chose for a URL that
	// names none (a task's export_conn_id); "" for the store's default
	// credentials. A Handle opens a bucket once per connection, with the
	// credentials Handle.Connect gave for it.
	ConnID string

	form string  // the URL scheme as written, which String keeps
	kind keyKind // what Parse or ParsePrefix checked the key for
}

// keyKind says how a Location's key was checked: a Handle uses only
// Locations that Registry.Parse (an object) or ParsePrefix (a listing)
// made, so no key reaches a store unchecked.
type keyKind uint8

const (
	unchecked keyKind = iota
	objectKey
	prefixKey
)

func (k keyKind) check(key string) error {
	if k == prefixKey {
		return checkPrefix(key)
	}
	return checkKey(key)
}

// String is the URL without its connection id, in the scheme it was
// written with: s3://bucket/key, abfs://container/key, file:///path.
// The key is path-escaped segment by segment, so the URL parses back to
// the same key even when it holds "%", "?", "#" or a space (a custom run
// id filled into {run_id}).
func (l Location) String() string {
	form := l.form
	if form == "" {
		form = l.Scheme
	}
	return form + "://" + l.Bucket + "/" + escapeKey(l.Key)
}

func escapeKey(key string) string {
	segs := strings.Split(key, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// ParseBucketURL reads scheme://[conn_id@]bucket/key, the URL form of most
// stores: a Registration without ParseURL gets it. Its errors follow the URL in
// a message ("<url> has a port; ..."); connType is the connection type the
// advice names, bucket what the store calls a bucket ("container").
func ParseBucketURL(u *url.URL, connType, bucket string) (Location, error) {
	var loc Location
	loc.Bucket = u.Host
	if u.User != nil {
		if _, hasPassword := u.User.Password(); hasPassword {
			return Location{}, fmt.Errorf("carries credentials in the URL; put them in %s connection instead", article(connType))
		}
		loc.ConnID = u.User.Username()
	}
	if u.Port() != "" {
		return Location{}, fmt.Errorf("has a port; a storage URL names a %s, not a server: put the endpoint in the %s connection", bucket, connType)
	}
	if loc.Bucket == "" {
		return Location{}, fmt.Errorf("has no %s; write it as %s://%s/key", bucket, strings.ToLower(u.Scheme), bucket)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return Location{}, fmt.Errorf("has a query or fragment, which object keys cannot carry here; remove the part after ? or #")
	}
	loc.Key = strings.TrimPrefix(u.Path, "/")
	return loc, nil
}

// article is "a aws" said right: "an aws connection", "a wasb connection".
func article(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an " + word
	}
	return "a " + word
}

// checkKey holds a key to what every store keeps verbatim.
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
	return nil
}

// checkPrefix holds a listing's key prefix to what checkKey allows, except
// that it may be empty (the whole bucket) or end with "/" (a directory).
func checkPrefix(prefix string) error {
	if p := strings.TrimSuffix(prefix, "/"); p != "" {
		return checkKey(p)
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

package storage

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
)

// Listed is one object List found.
type Listed struct {
	URL      string    `json:"url"`
	Size     int64     `json:"size"`
	Modified time.Time `json:"modified"`
}

// ErrTooMany is List's error when a prefix holds more objects than the
// caller allows; it is final, as the listing will not shrink by itself.
var ErrTooMany = final.New("too many objects")

// List lists the objects under prefix (s3://bucket/incoming/,
// file:///data/incoming/, or a key prefix such as s3://bucket/incoming/2026-),
// sorted by URL. It leaves out what an interrupted export leaves behind
// (<dest>.<hex>.partial, <name>.<hex>.tmp), so an export still in flight
// is never picked up, and, with match, every object whose name (the last
// path segment) does not match that shell pattern (path.Match: "*.csv").
// The URLs carry no connection id: a task that reads them names its own
// connection. More than max objects (max >= 1) is an error wrapping
// ErrTooMany that says how to narrow the listing; a missing bucket wraps
// ErrNoBucket. file:// prefixes must lie under FileRootsEnv like any
// file:// URL.
func List(ctx context.Context, prefix, match string, max int, opt Options) ([]Listed, error) {
	if max < 1 {
		return nil, final.Errorf("listing %s: the limit is %d; allow at least one object", redactURL(prefix), max)
	}
	if match != "" {
		if _, err := path.Match(match, ""); err != nil {
			return nil, final.Errorf("listing %s: match %q is not a shell pattern (%v); write it as path.Match does, e.g. *.csv", redactURL(prefix), match, err)
		}
	}
	loc, st, err := openURL(ctx, prefix, ParsePrefix, opt, "listing ")
	if err != nil {
		return nil, err
	}
	defer st.Close()
	l, ok := st.(Lister)
	if !ok {
		return nil, final.Errorf("listing %s: the %s store cannot list its objects", loc, loc.Scheme)
	}
	var out []Listed
	err = l.List(ctx, loc.Key, func(o Object) bool {
		name := path.Base(o.Key)
		if strings.HasSuffix(o.Key, "/") || IsLeftoverPartial(name) || leftoverTemp(name) {
			return true
		}
		if ok, _ := path.Match(match, name); match != "" && !ok {
			return true
		}
		out = append(out, Listed{URL: Location{Scheme: loc.Scheme, Bucket: loc.Bucket, Key: o.Key, form: loc.form}.String(), Size: o.Size, Modified: o.Modified.UTC()})
		return len(out) <= max
	})
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", loc, err)
	}
	if len(out) > max {
		return nil, fmt.Errorf("listing %s: %w: more than %d match; list a narrower prefix or pattern, or raise the limit (Airflow maps at most [core] max_map_length, 1024 by default, instances over a list)", loc, ErrTooMany, max)
	}
	slices.SortFunc(out, func(a, b Listed) int { return strings.Compare(a.URL, b.URL) })
	return out, nil
}

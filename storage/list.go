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

// List lists the objects under prefix (a Location from ParsePrefix:
// s3://bucket/incoming/, file:///data/incoming/, or a key prefix such as
// s3://bucket/incoming/2026-), sorted by URL. It leaves out what an
// interrupted export leaves behind (<dest>.<hex>.partial, <name>.<hex>.tmp),
// so an export still in flight is never picked up, and, with match, every
// object whose name (the last path segment) does not match that shell
// pattern (path.Match: "*.csv"). The URLs carry no connection id: a task
// that reads them names its own connection. More than max objects (max >=
// 1) is an error wrapping ErrTooMany that says how to narrow the listing; a
// missing bucket wraps ErrNoBucket. file:// prefixes must lie under
// FileRootsEnv like any file:// URL.
func (h *Handle) List(ctx context.Context, prefix Location, match string, max int) ([]Listed, error) {
	if max < 1 {
		return nil, final.Errorf("listing %s: the limit is %d; allow at least one object", prefix, max)
	}
	if match != "" {
		if _, err := path.Match(match, ""); err != nil {
			return nil, final.Errorf("listing %s: match %q is not a shell pattern (%v); write it as path.Match does, e.g. *.csv", prefix, match, err)
		}
	}
	b, err := h.open(ctx, prefix, "listing ")
	if err != nil {
		return nil, err
	}
	l, ok := b.d.(Lister)
	if !ok {
		return nil, final.Errorf("listing %s: the %s store cannot list its objects", prefix, prefix.Scheme)
	}
	out, err := collect(ctx, l, prefix, match, max)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", prefix, err)
	}
	if len(out) > max {
		return nil, fmt.Errorf("listing %s: %w: more than %d match; list a narrower prefix or pattern, or raise the limit (Airflow maps at most [core] max_map_length, 1024 by default, instances over a list)", prefix, ErrTooMany, max)
	}
	slices.SortFunc(out, func(a, b Listed) int { return strings.Compare(a.URL, b.URL) })
	return out, nil
}

// collect lists the objects under prefix whose names match, up to one more
// than max, leaving out placeholders and what interrupted exports left.
func collect(ctx context.Context, l Lister, prefix Location, match string, max int) ([]Listed, error) {
	var out []Listed
	err := l.List(ctx, prefix.Key, func(o Object) bool {
		name := path.Base(o.Key)
		if strings.HasSuffix(o.Key, "/") || IsLeftoverPartial(name) || leftoverTemp(name) {
			return true
		}
		if ok, _ := path.Match(match, name); match != "" && !ok {
			return true
		}
		at := prefix
		at.Key, at.ConnID = o.Key, ""
		out = append(out, Listed{URL: at.String(), Size: o.Size, Modified: o.Modified.UTC()})
		return len(out) <= max
	})
	return out, err
}

package tasks

import (
	"context"
	"fmt"

	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

// Listing bounds: by default as many as Airflow maps over one list
// ([core] max_map_length, 1024 unless the deployment raises it), and never
// more than a task's XCom should carry.
const (
	DefaultListMax = 1024
	maxListMax     = 100_000
)

// ListInput lists the objects under a storage prefix: the upstream of a
// task mapped over them (inputs: {url: {xcom: list_objects, expand: true}}).
type ListInput struct {
	// Prefix is a URL prefix: s3://bucket/incoming/, file:///data/in/, or
	// a key prefix such as s3://bucket/incoming/2026-12-.
	Prefix string `json:"prefix"`
	// Match keeps the objects whose name (the last path segment) matches
	// this shell pattern ("*.csv"); empty keeps every object.
	Match string `json:"match,omitempty"`
	// StorageConnID is the connection to list with (aws_default). Empty:
	// the one the URL names (s3://conn_id@bucket/...), or the store's
	// default credentials.
	StorageConnID string `json:"storage_conn_id,omitempty"`
	// Max is the most objects the task may return (default 1024); more
	// fails the task, saying how to narrow the listing.
	Max int `json:"max,omitempty"`
}

// List returns the URLs of the objects under in.Prefix, sorted, leaving
// out what an interrupted export left behind: the list a mapped task
// expands over, one instance per object. None found is an empty list
// (Airflow then skips the mapped task). The URLs carry no connection id:
// give the mapped task its storage_conn_id.
func List(ctx context.Context, d Deps, in ListInput) ([]string, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	max := in.Max
	switch {
	case in.Prefix == "":
		return nil, final.Errorf("prefix is empty; give the URL prefix to list, e.g. s3://bucket/incoming/")
	case max == 0:
		max = DefaultListMax
	case max < 0 || max > maxListMax:
		return nil, final.Errorf("max is %d; give a number of objects from 1 to %d", max, maxListMax)
	}
	d, done := d.withStorage()
	defer done()
	prefix, err := parseOne(d, "prefix", in.Prefix, (*storage.Registry).ParsePrefix)
	if err != nil {
		return nil, err
	}
	locs, err := resolveStorage(ctx, d, "storage_conn_id", in.StorageConnID, map[string]storage.Location{"prefix": prefix})
	if err != nil {
		return nil, err
	}
	found, err := d.Storage.List(ctx, locs["prefix"], in.Match, max)
	if err != nil {
		return nil, fmt.Errorf("prefix: %w", err)
	}
	urls := make([]string, len(found))
	var bytes int64
	for i, o := range found {
		urls[i] = o.URL
		bytes += o.Size
	}
	d.logger().Info("listed objects", "prefix", prefix.String(), "match", in.Match, "objects", len(urls), "bytes", bytes)
	return urls, nil
}

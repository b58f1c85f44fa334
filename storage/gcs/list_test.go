package gcs_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
	"github.com/airflow-sandbox/airflow-go-worker/storage/gcs"
)

// pagedListing serves objects.list of bucket bkt in two pages, the first
// holding a console folder placeholder, which fake-gcs-server's filesystem
// backend cannot keep; it counts the pages asked for.
func pagedListing(t *testing.T) (storage.Lister, *atomic.Int32) {
	var pages atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/storage/v1/b/bkt/o" || r.URL.Query().Get("prefix") != "in/" {
			http.Error(w, `{"error":{"code":400,"message":"unexpected request"}}`, http.StatusBadRequest)
			t.Errorf("unexpected request %s %s", r.Method, r.URL)
			return
		}
		pages.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("pageToken") == "" {
			fmt.Fprint(w, `{"nextPageToken":"p2","items":[
				{"name":"in/a","size":"3","updated":"2026-12-01T10:00:00.123Z"},
				{"name":"in/folder/","size":"0","updated":"2026-12-01T10:00:00Z"},
				{"name":"in/b","size":"5000000000","updated":"2026-12-01T11:00:00Z"}]}`)
			return
		}
		fmt.Fprint(w, `{"items":[{"name":"in/c","size":"0","updated":"2026-12-01T12:00:00Z"}]}`)
	}))
	t.Cleanup(srv.Close)
	creds, err := storage.Default.FromConnection("gs", connections.Connection{ConnID: "paged", ConnType: "google_cloud_platform",
		Extra: `{"gcs.endpoint": "` + srv.URL + `", "is_anonymous": true}`})
	if err != nil {
		t.Fatal(err)
	}
	d, err := gcs.Open(context.Background(), "bkt", creds)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d.(storage.Lister), &pages
}

// List reads every page, skips the placeholder and keeps sizes beyond
// 32 bits and times to the millisecond.
func TestListPagesAndSkipsPlaceholders(t *testing.T) {
	l, pages := pagedListing(t)
	var got []storage.Object
	if err := l.List(context.Background(), "in/", func(o storage.Object) bool { got = append(got, o); return true }); err != nil {
		t.Fatal(err)
	}
	want := []storage.Object{
		{Key: "in/a", Size: 3, Modified: time.Date(2026, 12, 1, 10, 0, 0, 123e6, time.UTC)},
		{Key: "in/b", Size: 5000000000, Modified: time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)},
		{Key: "in/c", Size: 0, Modified: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)},
	}
	if !slices.EqualFunc(got, want, func(a, b storage.Object) bool {
		return a.Key == b.Key && a.Size == b.Size && a.Modified.Equal(b.Modified)
	}) {
		t.Fatalf("listed %+v, want %+v", got, want)
	}
	if n := pages.Load(); n != 2 {
		t.Fatalf("%d pages asked for, want 2", n)
	}
}

// A caller that has had enough on the first page costs no second request.
func TestListStopsPaging(t *testing.T) {
	l, pages := pagedListing(t)
	calls := 0
	if err := l.List(context.Background(), "in/", func(storage.Object) bool { calls++; return false }); err != nil {
		t.Fatal(err)
	}
	if calls != 1 || pages.Load() != 1 {
		t.Fatalf("each called %d times over %d pages; want once, on the first page only", calls, pages.Load())
	}
}

package gcsserver

import (
	"net/http"
	"strings"
	"testing"
)

func TestStartServesAndStops(t *testing.T) {
	s := Start(t)
	s.CreateBucket(t, "b1")
	if got := s.Objects(t, "b1"); len(got) != 0 {
		t.Fatalf("a new bucket lists %v", got)
	}
	resp, err := http.Get(s.Endpoint + "/storage/v1/b/b1")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("bucket b1: %v %v", resp, err)
	}
	resp.Body.Close()
	if !strings.HasPrefix(s.Endpoint, "http://127.0.0.1:") {
		t.Fatalf("endpoint %s is not on 127.0.0.1", s.Endpoint)
	}
	s.Stop()
	if resp, err := http.Get(s.Endpoint + "/"); err == nil {
		resp.Body.Close()
		t.Fatal("server still answers after Stop")
	}
	s.Stop() // idempotent
}

package storage

import (
	"context"
	"io"
	"maps"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
)

// memCreds and memBucket are a store of the test's own, registered as a
// store package would register itself.
type memCreds struct{ token string }

func (m *memCreds) Secrets() map[string]string { return map[string]string{"token": m.token} }

type memBucket struct {
	Driver  // only Put, Check and Close are called
	objects map[string]string
}

func (b *memBucket) Put(_ context.Context, key string, r io.Reader) error {
	data, err := io.ReadAll(r)
	b.objects[key] = string(data)
	return err
}
func (b *memBucket) Check(context.Context) error { return nil }
func (b *memBucket) Close() error                { return nil }

// memRegistry is a registry of file:// and the mem store, registered as a
// store package would register itself.
func memRegistry(objects map[string]string) *Registry {
	r := NewRegistry()
	r.Register(Registration{
		Scheme: "mem", Forms: []string{"mem", "memory"}, ConnTypes: []string{"memstore"},
		FromConnection: func(c connections.Connection) (Credentials, error) {
			return &memCreds{token: c.Password}, nil
		},
		Open: func(_ context.Context, _ string, creds Credentials) (Driver, error) {
			c, err := CredentialsAs[*memCreds](creds)
			if err != nil || c == nil || c.token != "t0k" {
				return nil, io.ErrUnexpectedEOF
			}
			return &memBucket{objects: objects}, nil
		},
	})
	return r
}

// TestRegisteredStore: a store that is one package plus its Register call
// gets its URLs parsed (in each of its forms), its connections resolved
// and checked, and its buckets opened, with nothing in package storage
// naming it.
func TestRegisteredStore(t *testing.T) {
	memObjects := map[string]string{}
	reg := memRegistry(memObjects)
	loc, err := reg.Parse("memory://mine@bkt/dir/key")
	if err != nil || loc.Scheme != "mem" || loc.ConnID != "mine" || loc.Bucket != "bkt" || loc.Key != "dir/key" {
		t.Fatalf("Parse: %+v, %v", loc, err)
	}
	if _, err := reg.FromConnection("mem", connections.Connection{ConnID: "x", ConnType: "aws"}); err == nil || !strings.Contains(err.Error(), "not memstore") {
		t.Fatalf("wrong type: %v", err)
	}
	creds, err := reg.FromConnection("mem", connections.Connection{ConnID: "mine", ConnType: "memstore", Password: "t0k"})
	if err != nil || creds.Secrets()["token"] != "t0k" {
		t.Fatalf("FromConnection: %v, %v", creds, err)
	}
	k, err := reg.Parse("mem://mine@bkt/k")
	if err != nil {
		t.Fatal(err)
	}
	h := reg.NewHandle(Options{})
	defer h.Close()
	if _, err := h.Put(context.Background(), k, strings.NewReader("x")); err == nil || !strings.Contains(err.Error(), "a memstore connection") {
		t.Fatalf("a URL naming a connection without its credentials: %v", err)
	}
	h.Connect("mem", "mine", creds)
	if _, err := h.Put(context.Background(), k, strings.NewReader("hello")); err != nil {
		t.Fatal(err)
	}
	if memObjects["k"] != "hello" {
		t.Fatalf("stored %q", memObjects)
	}
	prefix, err := reg.ParsePrefix("mem://mine@bkt/")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.List(context.Background(), prefix, "", 10); err == nil || !strings.Contains(err.Error(), "the mem store cannot list its objects") {
		t.Fatalf("a store whose driver is no Lister: %v", err)
	}
}

// countingBucket counts the bucket checks of a memBucket.
type countingBucket struct {
	*memBucket
	checks *int
}

func (b countingBucket) Check(ctx context.Context) error { *b.checks++; return nil }

// TestHandleOpensABucketOncePerConnection: a handle opens a bucket the
// first time a Location there is used and keeps it for every later use,
// checks it once, and opens it again only for another connection (another
// identity) or another bucket; a Location no Parse made is refused before
// any store sees its key.
func TestHandleOpensABucketOncePerConnection(t *testing.T) {
	ctx := context.Background()
	objects := map[string]string{}
	opens, checks := map[string]int{}, 0
	reg := NewRegistry()
	reg.Register(Registration{
		Scheme: "mem", ConnTypes: []string{"memstore"},
		FromConnection: func(c connections.Connection) (Credentials, error) { return &memCreds{token: c.Password}, nil },
		Open: func(_ context.Context, bucket string, creds Credentials) (Driver, error) {
			c, _ := CredentialsAs[*memCreds](creds)
			opens[bucket+" as "+c.token]++
			return countingBucket{&memBucket{objects: objects}, &checks}, nil
		},
	})
	h := reg.NewHandle(Options{})
	defer h.Close()
	h.Connect("mem", "", &memCreds{token: "default"})
	h.Connect("mem", "other", &memCreds{token: "other"})
	for _, raw := range []string{"mem://b/1", "mem://b/2", "mem://b/3", "mem://other@b/4", "mem://c/5"} {
		loc, err := reg.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Check(ctx, loc, false); err != nil {
			t.Fatal(err)
		}
		if _, err := h.Put(ctx, loc, strings.NewReader(raw)); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]int{"b as default": 1, "b as other": 1, "c as default": 1}
	if !maps.Equal(opens, want) || checks != 3 || len(objects) != 5 {
		t.Errorf("opened %v (want %v), checked %d buckets (want 3), wrote %d objects (want 5)", opens, want, checks, len(objects))
	}
	_, err := h.Put(ctx, Location{Scheme: "mem", Bucket: "b", Key: "../x"}, strings.NewReader("x"))
	if err == nil || !strings.Contains(err.Error(), "not made by Registry.Parse") || len(objects) != 5 {
		t.Errorf("a Location no Parse made: %v, %d objects", err, len(objects))
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	loc, _ := reg.Parse("mem://b/6")
	if _, err := h.Put(ctx, loc, strings.NewReader("x")); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("a closed handle: %v", err)
	}
}

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

// registerMem registers the mem store for the rest of the test.
func registerMem(t *testing.T, objects map[string]string) {
	Register(Registration{
		Scheme: "mem", Forms: []string{"mem", "memory"}, ConnTypes: []string{"memstore"},
		FromConnection: func(c connections.Connection) (Credentials, error) {
			return &memCreds{token: c.Password}, nil
		},
		Open: func(_ context.Context, loc Location, opt Options) (Driver, error) {
			c, err := CredentialsFor[*memCreds](opt, "mem")
			if err != nil || c == nil || c.token != "t0k" {
				return nil, io.ErrUnexpectedEOF
			}
			return &memBucket{objects: objects}, nil
		},
	})
	t.Cleanup(func() { unregister("mem") })
}

// unregister removes a store a test registered, with its URL schemes.
func unregister(scheme string) {
	driversMu.Lock()
	defer driversMu.Unlock()
	d := drivers[scheme]
	delete(drivers, scheme)
	maps.DeleteFunc(forms, func(_, store string) bool { return store == scheme })
	for f := range d.Refuse {
		delete(refused, f)
	}
}

// TestRegisteredStore: a store that is one package plus its Register call
// gets its URLs parsed (in each of its forms), its connections resolved
// and checked, and its buckets opened, with nothing in package storage
// naming it.
func TestRegisteredStore(t *testing.T) {
	memObjects := map[string]string{}
	registerMem(t, memObjects)
	loc, err := ParseURL("memory://mine@bkt/dir/key")
	if err != nil || loc.Scheme != "mem" || loc.ConnID != "mine" || loc.Bucket != "bkt" || loc.Key != "dir/key" {
		t.Fatalf("ParseURL: %+v, %v", loc, err)
	}
	if _, err := FromConnection("mem", connections.Connection{ConnID: "x", ConnType: "aws"}); err == nil || !strings.Contains(err.Error(), "not memstore") {
		t.Fatalf("wrong type: %v", err)
	}
	creds, err := FromConnection("mem", connections.Connection{ConnID: "mine", ConnType: "memstore", Password: "t0k"})
	if err != nil || creds.Secrets()["token"] != "t0k" {
		t.Fatalf("FromConnection: %v, %v", creds, err)
	}
	if _, err := Put(context.Background(), "mem://mine@bkt/k", strings.NewReader("x"), Options{}); err == nil || !strings.Contains(err.Error(), "a memstore connection") {
		t.Fatalf("a URL naming a connection without its credentials: %v", err)
	}
	opt := Options{Credentials: map[string]Credentials{"mem": creds}}
	if _, err := Put(context.Background(), "mem://mine@bkt/k", strings.NewReader("hello"), opt); err != nil {
		t.Fatal(err)
	}
	if memObjects["k"] != "hello" {
		t.Fatalf("stored %q", memObjects)
	}
}

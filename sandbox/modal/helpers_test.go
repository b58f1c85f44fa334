package modal

import (
	"context"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
	"github.com/airflow-sandbox/airflow-go-worker/testing/fakemodal"
)

// newFake starts a fake Modal, points the SDK at it and returns a driver
// using the fake's tokens through the connection config.
func newFake(t testing.TB, edit func(*Options)) (*fakemodal.Server, *Driver) {
	t.Helper()
	fake := fakemodal.Start(t, fakemodal.Options{})
	fake.SetEnv(t)
	opts := Options{
		Credentials: Credentials{TokenID: fake.TokenID(), TokenSecret: fake.TokenSecret(), Source: "modal_test"},
		Logger:      hclog.NewNullLogger(),
		RetryDelay:  10e6,
	}
	if edit != nil {
		edit(&opts)
	}
	drv, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Close() })
	return fake, drv
}

// assertNoLeak fails when the fake still runs a sandbox. No wait is needed:
// the fake records a terminate before it answers it.
func assertNoLeak(t testing.TB, fake *fakemodal.Server) {
	t.Helper()
	if live := fake.Sandboxes(); len(live) != 0 {
		t.Fatalf("%d sandbox(es) leaked: %+v", len(live), live)
	}
}

func mustCreate(t testing.TB, drv driver.Driver, spec sandbox.Spec) *sandbox.Sandbox {
	t.Helper()
	sb, err := sandbox.NewBackend(drv).Create(context.Background(), spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return sb
}

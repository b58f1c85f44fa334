package sandbox

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

func TestCreateStampsTagsAndRefusesInvalidSpecs(t *testing.T) {
	ctx := context.Background()
	drv := newFake()
	if _, err := NewBackend(drv).Create(ctx, Spec{CPU: -1}); !errors.Is(err, ErrRefused) {
		t.Fatalf("invalid spec: want ErrRefused, got %v", err)
	}
	if len(drv.boxes) != 0 {
		t.Fatal("an invalid spec reached the driver")
	}
	sb, err := NewBackend(drv).Create(ctx, Spec{Owner: "dag/run"})
	if err != nil {
		t.Fatal(err)
	}
	info, _ := sb.Info(ctx)
	if info.Backend != "fake" || info.Workdir != DefaultWorkdir || !strings.HasPrefix(info.Name, NamePrefix) {
		t.Errorf("info = %+v", info)
	}
	tags, _ := sb.Tags(ctx)
	if tags[TagOwner] != "dag/run" || tags[TagSandbox] != info.Name || tags[TagCreatedBy] != CreatedByValue {
		t.Errorf("tags = %v", tags)
	}
	if exp := ExpiresAt(tags); exp.Before(time.Now().Add(DefaultLifetime - time.Minute)) {
		t.Errorf("expiry %v is not the default lifetime away", exp)
	}
}

func TestExecCapsOutputAndReportsTruncation(t *testing.T) {
	ctx := context.Background()
	drv := newFake()
	drv.execOut = "0123456789"
	sb, _ := NewBackend(drv).Create(ctx, Spec{})
	var out, errb bytes.Buffer
	res, err := sb.Exec(ctx, "x", ExecOptions{Stdout: &out, Stderr: &errb, MaxOutputBytes: 4})
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != "0123" || errb.String() != "0123" || !res.StdoutTruncated || !res.StderrTruncated {
		t.Errorf("out %q err %q result %+v", out.String(), errb.String(), res)
	}
	out.Reset()
	res, _ = sb.Exec(ctx, "x", ExecOptions{Stdout: &out, MaxOutputBytes: 10})
	if out.String() != "0123456789" || res.StdoutTruncated {
		t.Errorf("exactly at the cap: out %q truncated %v", out.String(), res.StdoutTruncated)
	}
	// No cap, nil writers: output is discarded, not a panic.
	if _, err := sb.Exec(ctx, "x", ExecOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestExecTimeoutDefaultsAndIsClippedToLifetime(t *testing.T) {
	ctx := context.Background()
	drv := newFake()
	sb, _ := NewBackend(drv).Create(ctx, Spec{Lifetime: time.Hour})
	res, _ := sb.Exec(ctx, "x", ExecOptions{})
	if drv.lastExec.Timeout != DefaultExecTimeout || res.AppliedTimeout != DefaultExecTimeout {
		t.Errorf("default exec timeout: sent %v, applied %v", drv.lastExec.Timeout, res.AppliedTimeout)
	}
	// Ten minutes before expiry, a 30-minute command gets ten minutes.
	sb.now = func() time.Time { return time.Now().Add(50 * time.Minute) }
	res, _ = sb.Exec(ctx, "x", ExecOptions{Timeout: 30 * time.Minute})
	if d := drv.lastExec.Timeout; d > 10*time.Minute || d < 9*time.Minute {
		t.Errorf("timeout %v not clipped to the ~10 minutes left", d)
	}
	if res.AppliedTimeout != drv.lastExec.Timeout {
		t.Errorf("applied timeout %v != sent %v", res.AppliedTimeout, drv.lastExec.Timeout)
	}
	// Past expiry: at least a second, so the backend reports the deadline.
	sb.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	sb.Exec(ctx, "x", ExecOptions{Timeout: time.Minute})
	if drv.lastExec.Timeout != time.Second {
		t.Errorf("past expiry: timeout %v, want 1s", drv.lastExec.Timeout)
	}
}

func TestPathsResolveAgainstWorkdir(t *testing.T) {
	ctx := context.Background()
	drv := newFake()
	sb, _ := NewBackend(drv).Create(ctx, Spec{Workdir: "/home/job"})
	if err := sb.WriteFile(ctx, "out/a.txt", strings.NewReader("a"), 0); err != nil {
		t.Fatal(err)
	}
	box := drv.boxes[sb.ID()]
	if _, ok := box.files["/home/job/out/a.txt"]; !ok {
		t.Fatalf("relative path not resolved against the workdir: %v", box.files)
	}
	if box.modes["/home/job/out/a.txt"] != 0o644 {
		t.Errorf("mode 0 must mean 0644, got %v", box.modes["/home/job/out/a.txt"])
	}
	if err := sb.WriteFile(ctx, "/tmp/../etc/x", strings.NewReader("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok := box.files["/etc/x"]; !ok {
		t.Errorf("absolute path not cleaned: %v", box.files)
	}
	sb.Exec(ctx, "x", ExecOptions{Workdir: "sub"})
	if drv.lastExec.Workdir != "/home/job/sub" {
		t.Errorf("exec workdir %q", drv.lastExec.Workdir)
	}
	if _, err := sb.Stat(ctx, ""); err == nil {
		t.Error("an empty path must be an error")
	}
}

func TestOpenFileStopsAGrowingFile(t *testing.T) {
	ctx := context.Background()
	drv := newFake()
	sb, _ := NewBackend(drv).Create(ctx, Spec{})
	sb.WriteFile(ctx, "f", strings.NewReader("12345"), 0)
	drv.extraOnRead = 100 // the file grows to 105 bytes while read
	rc, size, err := sb.OpenFile(ctx, "f", 10)
	if err != nil || size != 5 {
		t.Fatalf("open: %d, %v", size, err)
	}
	got, err := io.ReadAll(rc)
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.MaxBytes != 10 || tl.Size != -1 {
		t.Fatalf("want a TooLargeError with unknown size, got %v", err)
	}
	if len(got) != 10 {
		t.Errorf("got %d bytes before the error, want the 10 allowed", len(got))
	}
	// A negative limit reads everything.
	rc, _, _ = sb.OpenFile(ctx, "f", -1)
	all, err := io.ReadAll(rc)
	if err != nil || len(all) != 105 {
		t.Errorf("unlimited read: %d bytes, %v", len(all), err)
	}
	// Exactly at the limit is fine.
	drv.extraOnRead = 0
	rc, _, _ = sb.OpenFile(ctx, "f", 5)
	if got, err := io.ReadAll(rc); err != nil || string(got) != "12345" {
		t.Errorf("read at the limit: %q, %v", got, err)
	}
}

func TestDestroyIsIdempotent(t *testing.T) {
	ctx := context.Background()
	drv := newFake()
	sb, _ := NewBackend(drv).Create(ctx, Spec{})
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Errorf("second destroy: %v", err)
	}
	if _, err := open(drv, sb.ID()).Info(ctx); !errors.Is(err, ErrGone) {
		t.Errorf("info after destroy: %v", err)
	}
}

func TestExecRefusesAnInvalidEnvironment(t *testing.T) {
	ctx := context.Background()
	drv := newFake()
	sb, _ := NewBackend(drv).Create(ctx, Spec{})
	for name, env := range map[string]map[string]string{
		"NUL in a value": {"TOKEN": "s3cret\x00--bind\x00/\x00/host"},
		"NUL in a name":  {"A\x00B": "v"},
		"= in a name":    {"A=B": "v"},
		"empty name":     {"": "v"},
	} {
		drv.lastExec = ExecRequest{}
		_, err := sb.Exec(ctx, "true", ExecOptions{Env: env})
		if err == nil || !IsFinal(err) {
			t.Errorf("%s: want a terminal error, got %v", name, err)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: the error shows the value: %v", name, err)
		}
		if drv.lastExec.Command != "" {
			t.Errorf("%s: the command reached the driver", name)
		}
	}
}

// A spec asking for what the backend's capabilities do not cover is refused
// before the driver is called, naming each field and the backend.
func TestCreateRefusesWhatTheBackendCannotDo(t *testing.T) {
	drv := newFake()
	_, err := NewBackend(drv).Create(context.Background(), Spec{GPU: "A10G", CPU: 2})
	if !errors.Is(err, ErrRefused) || !IsFinal(err) || !strings.Contains(err.Error(), "gpu: the fake backend cannot provide GPUs") {
		t.Fatalf("want a terminal refusal naming gpu and the backend, got %v", err)
	}
	if drv.creates != 0 {
		t.Fatalf("the driver was asked to create %d sandboxes", drv.creates)
	}
	if _, err := NewBackend(drv).Create(context.Background(), Spec{CPU: 2}); err != nil {
		t.Fatalf("cpu is within the fake's capabilities: %v", err)
	}
}

// Create applies the driver's own rules (SpecProblems) as it does the
// capabilities, before the driver is called, and names the backends that
// could give what this one lacks when it was given them (SuggestBackends).
func TestCreateRefusesByTheDriversRulesAndSuggestsBackends(t *testing.T) {
	drv := newFake()
	_, err := NewBackend(drv).Create(context.Background(), Spec{Image: "refused:latest"})
	if !errors.Is(err, ErrRefused) || !IsFinal(err) || !strings.Contains(err.Error(), "the fake backend refuses this sandbox: image: the fake backend refuses this image") {
		t.Fatalf("want the driver's rule as a terminal refusal, got %v", err)
	}
	able := func(c Capability) []string {
		if c == driver.CapGPU {
			return []string{"modal"}
		}
		return nil
	}
	_, err = NewBackend(drv, SuggestBackends(able)).Create(context.Background(), Spec{GPU: "A10G"})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "gpu: the fake backend cannot provide GPUs, which modal can") {
		t.Fatalf("want the refusal to name the able backend, got %v", err)
	}
	if drv.creates != 0 {
		t.Fatalf("the driver was asked to create %d sandboxes", drv.creates)
	}
}

// CheckUnstamped lets the portable layer's stamped spec through and gives a
// direct caller's spec the portable layer's refusal.
func TestCheckUnstampedChecksWhatThePortableLayerDidNot(t *testing.T) {
	drv := newFake()
	for _, spec := range []Spec{{GPU: "A10G"}, {Image: "refused:latest"}, {CPU: -1}} {
		if err := driver.CheckUnstamped(drv, "n", spec); !errors.Is(err, ErrRefused) {
			t.Errorf("%+v, unstamped: want a refusal, got %v", spec, err)
		}
	}
	if err := driver.CheckUnstamped(drv, "n", Spec{}); err != nil {
		t.Fatalf("a plain spec: %v", err)
	}
	stamped := Spec{GPU: "A10G", Tags: map[string]string{TagSandbox: "n"}}
	if err := driver.CheckUnstamped(drv, "n", stamped); err != nil {
		t.Fatalf("a spec the portable layer stamped (and so checked): %v", err)
	}
	if err := driver.CheckUnstamped(drv, "other", stamped); !errors.Is(err, ErrRefused) {
		t.Fatalf("a stamp for another name is no stamp: %v", err)
	}
}

// Features a driver lacks are optional interfaces: the portable layer says
// the backend does not support them.
func TestOptionalFeaturesAnswerUnsupported(t *testing.T) {
	plain := struct{ driver.Driver }{newFake()} // hides Tags, SetTags and ListSandboxes
	sb := open(plain, "fake-x")
	if _, err := sb.Tags(context.Background()); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "keeps no tags") {
		t.Fatalf("Tags on a driver without tags: %v", err)
	}
	if _, err := list(context.Background(), plain, nil); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("List on a driver without listing: %v", err)
	}
	if _, err := list(context.Background(), newFake(), nil); err != nil {
		t.Fatalf("List on a Lister: %v", err)
	}
}

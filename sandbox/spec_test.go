package sandbox

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestValidateNamesTheField(t *testing.T) {
	cases := []struct {
		name string
		spec Spec
		want string
	}{
		{"negative cpu", Spec{CPU: -1}, "cpu:"},
		{"negative memory", Spec{MemoryMiB: -5}, "memory_mib:"},
		{"negative lifetime", Spec{Lifetime: -time.Second}, "lifetime:"},
		{"huge lifetime", Spec{Lifetime: 25 * time.Hour}, "lifetime: 25h0m0s is longer than"},
		{"fractional timeout", Spec{Lifetime: 1500 * time.Millisecond}, "not a whole number of seconds"},
		{"relative workdir", Spec{Workdir: "work"}, `workdir: "work"`},
		{"unclean workdir", Spec{Workdir: "/a/../b"}, `workdir: "/a/../b"`},
		{"env name with =", Spec{Env: map[string]string{"A=B": "x"}}, `env: "A=B"`},
		{"empty env name", Spec{Env: map[string]string{"": "x"}}, `env: ""`},
		{"env value with NUL", Spec{Env: map[string]string{"K": "a\x00b"}}, "env: value of K"},
		{"allowlist on open network", Spec{Network: NetworkPolicy{Open: true, AllowHosts: []string{"x.org"}}}, "network.allow_hosts:"},
		{"owner without run", Spec{Owner: "just-a-dag"}, `owner: "just-a-dag"`},
		{"empty tag", Spec{Tags: map[string]string{"": "v"}}, "tags: empty tag name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.spec.Validate()
			if err == nil {
				t.Fatal("want an error")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not contain %q", err, c.want)
			}
			if !errors.Is(err, ErrRefused) || !IsFinal(err) {
				t.Fatalf("an invalid spec must be a terminal ErrRefused: %v", err)
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	err := Spec{CPU: -1, MemoryMiB: -1, Owner: "x"}.Validate()
	for _, field := range []string{"cpu:", "memory_mib:", "owner:"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("error %v does not name %s", err, field)
		}
	}
}

func TestValidSpecs(t *testing.T) {
	for _, s := range []Spec{
		{},
		Spec{}.WithDefaults(),
		{CPU: 0.5, MemoryMiB: 2048, Lifetime: 24 * time.Hour, Workdir: "/home/job", Env: map[string]string{"K": "v"},
			Network: NetworkPolicy{AllowCIDRs: []string{"10.0.0.0/8"}}, Owner: "dag/run", Tags: map[string]string{"t": ""}},
	} {
		if err := s.Validate(); err != nil {
			t.Errorf("%+v: %v", s, err)
		}
	}
}

func TestDefaults(t *testing.T) {
	s := Spec{}.WithDefaults()
	if s.Lifetime != DefaultLifetime || s.Workdir != DefaultWorkdir {
		t.Errorf("defaults: %+v", s)
	}
	if p := (Spec{}).NetworkPolicy(); p.Open || len(p.AllowHosts)+len(p.AllowCIDRs) != 0 {
		t.Errorf("the default network must be blocked with no allowlist: %+v", p)
	}
	kept := Spec{Lifetime: time.Minute, Workdir: "/w"}.WithDefaults()
	if kept.Lifetime != time.Minute || kept.Workdir != "/w" {
		t.Errorf("WithDefaults overwrote set fields: %+v", kept)
	}
}

func TestErrorKindsAndRetry(t *testing.T) {
	e := &Error{Op: "read", Sandbox: "sb", Path: "/x", Kind: ErrNotFound}
	if !errors.Is(e, ErrNotFound) || errors.Is(e, ErrGone) || IsRetryable(e) {
		t.Errorf("kind matching: %v", e)
	}
	if got := e.Error(); got != `read in sandbox sb "/x": no such file or directory` {
		t.Errorf("message %q", got)
	}
	r := Retryable(errors.New("503"))
	if !IsRetryable(r) || IsFinal(r) {
		t.Error("Retryable not retryable")
	}
	if !IsRetryable(Retryable(&Error{Op: "exec", Err: errors.New("reset")})) {
		t.Error("a retryable *Error is not retryable")
	}
	if Retryable(nil) != nil || IsFinal(nil) || Rejected(nil) != nil {
		t.Error("nil handling")
	}
	// Every kind is final (a task failing with one is not retried by
	// Airflow); an error with no kind and no mark is unknown, neither.
	for _, k := range []error{ErrNotFound, ErrIsDir, ErrNotRegular, ErrTooLarge, ErrGone, ErrRefused, ErrUnsupported, ErrRejected} {
		if e := (&Error{Op: "x", Kind: k, Err: errors.New("why")}); !IsFinal(e) || IsRetryable(e) {
			t.Errorf("kind %v: final %v, retryable %v", k, IsFinal(e), IsRetryable(e))
		}
	}
	unknown := &Error{Op: "exec", Err: errors.New("bubblewrap could not set up the sandbox")}
	if IsFinal(unknown) || IsRetryable(unknown) {
		t.Errorf("an unclassified error must be neither final nor retryable: %v", unknown)
	}
	rej := Rejected(errors.New("Modal refused the credentials"))
	if !errors.Is(rej, ErrRejected) || !IsFinal(rej) || rej.Error() != "Modal refused the credentials" {
		t.Errorf("Rejected: %v", rej)
	}
	tl := &TooLargeError{Path: "/f", Size: 10, MaxBytes: 5}
	wrapped := &Error{Op: "read", Err: tl}
	var got *TooLargeError
	if !errors.Is(wrapped, ErrTooLarge) || !errors.As(wrapped, &got) || got.Size != 10 {
		t.Errorf("TooLargeError through Error: %v", wrapped)
	}
}

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// Attachment is what Attach learns from the sandbox's tags.
type Attachment struct {
	Owner     string
	Holder    string
	ExpiresAt time.Time      // zero when unknown
	Network   *NetworkPolicy // nil when unknown
	Workdir   string
}

// attach claims a sandbox another task created, following the Python
// provider's rules: the owner tag must equal owner, no other holder may hold
// it, and the holder claim is written and read back. A missing or wrong
// owner is final; a sandbox another task holds may be released, so that
// error is left to Airflow's retries.
func attach(ctx context.Context, drv driver.Driver, id, owner, holder string) (*Sandbox, Attachment, error) {
	s := open(drv, id)
	fail := func(format string, a ...any) (*Sandbox, Attachment, error) {
		return nil, Attachment{}, &Error{Op: "attach", Sandbox: id, Err: final.Errorf(format, a...)}
	}
	// An empty owner would match a sandbox nobody provisioned for
	// handing over (no owner tag), and an empty holder is no claim at all.
	if owner == "" || holder == "" {
		return fail("attach needs an owner (<dag_id>/<run_id>) and a holder (<dag_id>/<run_id>/<task_id>); got owner %q, holder %q", owner, holder)
	}
	tags, err := s.Tags(ctx)
	if err != nil {
		return nil, Attachment{}, err
	}
	// Its lifetime is over (the tag is stamped before the backend starts
	// the clock, so it is never late): claiming it would only hand the
	// task a sandbox that is gone or about to be.
	if exp := ExpiresAt(tags); !exp.IsZero() && !time.Now().Before(exp) {
		return nil, Attachment{}, &Error{Op: "attach", Sandbox: id, Kind: ErrGone,
			Err: fmt.Errorf("sandbox expired at %s; provision a new one with a lifetime that covers the whole handoff", exp.UTC().Format(time.RFC3339))}
	}
	if got := tags[TagOwner]; got != owner {
		return fail("sandbox is not owned by %q (its owner is %q); attach from a task of the Dag run that provisioned it", owner, got)
	}
	if cur := tags[TagHolder]; cur != "" && cur != holder {
		return nil, Attachment{}, &Error{Op: "attach", Sandbox: id, Err: fmt.Errorf("sandbox is already held by %q; wait for that task to finish or release it", cur)}
	}
	if tags[TagHolder] != holder {
		claimed := maps.Clone(tags)
		claimed[TagHolder] = holder
		if err := s.SetTags(ctx, claimed); err != nil {
			return nil, Attachment{}, err
		}
		again, err := s.Tags(ctx)
		if err != nil {
			return nil, Attachment{}, err
		}
		if again[TagHolder] != holder {
			return nil, Attachment{}, &Error{Op: "attach", Sandbox: id, Err: fmt.Errorf("sandbox was claimed by %q while %q was attaching", again[TagHolder], holder)}
		}
		tags = again
	}
	att := Attachment{Owner: owner, Holder: holder, ExpiresAt: ExpiresAt(tags), Workdir: tags[TagWorkdir]}
	if raw, ok := tags[TagNetwork]; ok {
		if p, err := DecodeNetworkPolicy(raw); err == nil {
			att.Network = &p
		}
	}
	return s, att, nil
}

// release drops holder's claim on the sandbox, if it is still holder's. A
// sandbox that is already gone needs no release.
func release(ctx context.Context, drv driver.Driver, id, holder string) error {
	s := open(drv, id)
	tags, err := s.Tags(ctx)
	if errors.Is(err, ErrGone) {
		return nil
	}
	if err != nil {
		return err
	}
	if tags[TagHolder] != holder {
		return nil
	}
	released := maps.Clone(tags)
	delete(released, TagHolder)
	err = s.SetTags(ctx, released)
	if errors.Is(err, ErrGone) {
		return nil
	}
	return err
}

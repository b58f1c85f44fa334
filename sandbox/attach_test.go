package sandbox

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestAttachAndRelease(t *testing.T) {
	ctx := context.Background()
	drv := newFake()
	sb, _ := NewBackend(drv).Create(ctx, Spec{Owner: "dag/run", Workdir: "/workspace"})
	h1, h2 := HolderFor("dag", "run", "a", -1), HolderFor("dag", "run", "b", 2)

	if _, _, err := attach(ctx, drv, sb.ID(), "dag/other", h1); err == nil || !strings.Contains(err.Error(), "not owned by") {
		t.Fatalf("wrong owner: %v", err)
	} else if !IsFinal(err) {
		t.Error("attach errors are terminal")
	}
	got, att, err := attach(ctx, drv, sb.ID(), "dag/run", h1)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID() != sb.ID() || att.Owner != "dag/run" || att.Holder != h1 || att.Workdir != "/workspace" ||
		att.Network == nil || att.Network.Open || att.ExpiresAt.IsZero() {
		t.Errorf("attachment %+v", att)
	}
	if drv.boxes[sb.ID()].tags[TagHolder] != h1 {
		t.Errorf("holder tag not written: %v", drv.boxes[sb.ID()].tags)
	}
	if _, _, err := attach(ctx, drv, sb.ID(), "dag/run", h1); err != nil {
		t.Errorf("same holder again: %v", err)
	}
	if _, _, err := attach(ctx, drv, sb.ID(), "dag/run", h2); err == nil || !strings.Contains(err.Error(), "already held by") {
		t.Errorf("second holder: %v", err)
	}
	// Releasing someone else's claim leaves it.
	if err := release(ctx, drv, sb.ID(), h2); err != nil || drv.boxes[sb.ID()].tags[TagHolder] != h1 {
		t.Errorf("release by non-holder: %v, tags %v", err, drv.boxes[sb.ID()].tags)
	}
	if err := release(ctx, drv, sb.ID(), h1); err != nil {
		t.Fatal(err)
	}
	if _, held := drv.boxes[sb.ID()].tags[TagHolder]; held {
		t.Error("holder tag survived release")
	}
	if drv.boxes[sb.ID()].tags[TagOwner] != "dag/run" {
		t.Error("release dropped other tags")
	}
	sb.Destroy(ctx)
	if err := release(ctx, drv, sb.ID(), h1); err != nil {
		t.Errorf("release of a gone sandbox: %v", err)
	}
	if _, _, err := attach(ctx, drv, sb.ID(), "dag/run", h1); !errors.Is(err, ErrGone) {
		t.Errorf("attach to a gone sandbox: want ErrGone, got %v", err)
	}
}

func TestAttachLosesARace(t *testing.T) {
	ctx := context.Background()
	drv := newFake()
	sb, _ := NewBackend(drv).Create(ctx, Spec{Owner: "dag/run"})
	// Another task's claim lands right after ours.
	drv.onSetTags = func(b *fakeBox) { b.tags[TagHolder] = "dag/run/rival" }
	_, _, err := attach(ctx, drv, sb.ID(), "dag/run", "dag/run/me")
	if err == nil || !strings.Contains(err.Error(), "was claimed by") {
		t.Fatalf("want a lost-race error, got %v", err)
	}
}

func TestAttachToleratesAMalformedNetworkTag(t *testing.T) {
	ctx := context.Background()
	drv := newFake()
	sb, _ := NewBackend(drv).Create(ctx, Spec{Owner: "dag/run"})
	drv.boxes[sb.ID()].tags[TagNetwork] = "garbage"
	_, att, err := attach(ctx, drv, sb.ID(), "dag/run", "dag/run/t")
	if err != nil || att.Network != nil {
		t.Errorf("a malformed network tag must give no policy, not an error: %+v, %v", att, err)
	}
}

func TestAttachRefusesAnEmptyOwnerOrHolder(t *testing.T) {
	ctx := context.Background()
	drv := newFake()
	sb, _ := NewBackend(drv).Create(ctx, Spec{}) // no owner: never meant to be handed over
	if _, _, err := attach(ctx, drv, sb.ID(), "", "dag/run/t"); err == nil || !IsFinal(err) {
		t.Errorf("an empty owner matched an unowned sandbox: %v", err)
	}
	if _, _, err := attach(ctx, drv, sb.ID(), "dag/run", ""); err == nil {
		t.Error("an empty holder was accepted")
	}
	if _, held := drv.boxes[sb.ID()].tags[TagHolder]; held {
		t.Error("a refused attach wrote a holder tag")
	}
}

func TestAttachRefusesAnExpiredSandbox(t *testing.T) {
	ctx := context.Background()
	drv := newFake()
	sb, _ := NewBackend(drv).Create(ctx, Spec{Owner: "dag/run"})
	drv.boxes[sb.ID()].tags[TagExpiresAt] = strconv.FormatInt(time.Now().Add(-time.Minute).Unix(), 10)
	_, _, err := attach(ctx, drv, sb.ID(), "dag/run", "dag/run/t")
	if !errors.Is(err, ErrGone) || !IsFinal(err) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("want a terminal ErrGone saying it expired, got %v", err)
	}
	if _, held := drv.boxes[sb.ID()].tags[TagHolder]; held {
		t.Error("an expired sandbox was claimed")
	}
}

package storage

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

func writeAged(t *testing.T, p string, age time.Duration) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("left over"), 0o644); err != nil {
		t.Fatal(err)
	}
	when := time.Now().Add(-age)
	if err := os.Chtimes(p, when, when); err != nil {
		t.Fatal(err)
	}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// Issue 10, hole 10: a killed worker leaves temporary files and partials
// beside file:// destinations that nothing ever removed. Sweep removes
// those older than the age, and nothing else.
func TestSweepRemovesOldFileLeftovers(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	t.Setenv(FileRootsEnv, root)
	out := filepath.Join(root, "out")
	oldTmp := filepath.Join(out, "report.md.18f3a2b4c5d6e7f8.tmp")
	oldPartial := filepath.Join(out, "sub", "data.csv.0123456789ab.partial")
	oldPartialTmp := filepath.Join(out, "data.csv.0123456789ab.partial.18f3a2b4c5d6e7f9.tmp")
	freshTmp := filepath.Join(out, "live.bin.18f3a2b4c5d6e7fa.tmp") // an export still writing it
	userFiles := []string{filepath.Join(out, "report.md"), filepath.Join(out, "notes.tmp"), filepath.Join(out, "x.partial")}
	for _, p := range []string{oldTmp, oldPartial, oldPartialTmp} {
		writeAged(t, p, 48*time.Hour)
	}
	writeAged(t, freshTmp, time.Minute)
	for _, p := range userFiles {
		writeAged(t, p, 48*time.Hour)
	}
	// A symlinked directory inside the root leads outside: never followed.
	foreign := filepath.Join(outside, "theirs.0123456789ab.partial")
	writeAged(t, foreign, 48*time.Hour)
	if err := os.Symlink(outside, filepath.Join(out, "link")); err != nil {
		t.Fatal(err)
	}

	rep, err := Default.SweepOlderThan(context.Background(), "file://"+out, 24*time.Hour, true, nil)
	if err != nil || len(rep.Found) != 3 || len(rep.Removed) != 0 || !exists(oldTmp) {
		t.Fatalf("dry run: %+v, %v", rep, err)
	}
	rep, err = Default.SweepOlderThan(context.Background(), "file://"+out, 24*time.Hour, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(rep.Removed)
	want := []string{"file://" + oldPartialTmp, "file://" + oldTmp, "file://" + oldPartial}
	sort.Strings(want)
	if strings.Join(rep.Removed, " ") != strings.Join(want, " ") {
		t.Fatalf("removed %v, want %v", rep.Removed, want)
	}
	for _, p := range want {
		if exists(strings.TrimPrefix(p, "file://")) {
			t.Errorf("%s is still there", p)
		}
	}
	for _, p := range append(userFiles, freshTmp, foreign) {
		if !exists(p) {
			t.Errorf("%s was removed; sweep must only take old leftovers of ours under the prefix", p)
		}
	}
}

func TestSweepFileObeysTheRoots(t *testing.T) {
	root := t.TempDir()
	t.Setenv(FileRootsEnv, "")
	if _, err := Default.SweepOlderThan(context.Background(), "file://"+root, time.Hour, false, nil); err == nil || !strings.Contains(err.Error(), FileRootsEnv) {
		t.Fatalf("without roots: %v", err)
	}
	t.Setenv(FileRootsEnv, filepath.Join(root, "allowed"))
	os.Mkdir(filepath.Join(root, "allowed"), 0o755)
	victim := filepath.Join(root, "etc", "passwd.0123456789ab.partial")
	writeAged(t, victim, 48*time.Hour)
	_, err := Default.SweepOlderThan(context.Background(), "file://"+filepath.Join(root, "etc"), time.Hour, false, nil)
	if err == nil || !strings.Contains(err.Error(), "outside the directories") || !exists(victim) {
		t.Fatalf("outside the roots: %v", err)
	}
	if _, err := Default.SweepOlderThan(context.Background(), "file://"+filepath.Join(root, "allowed", "../etc"), time.Hour, false, nil); err == nil || !exists(victim) {
		t.Fatalf("climbing out with ..: %v", err)
	}
}

// A store is swept by its driver (storage/s3's Sweep, tested there): a
// prefix of a store with Registration.Sweep goes to it, a store without one says
// which can be swept, and a URL no linked store reads says so.
func TestSweepGoesToTheStoresDriver(t *testing.T) {
	ctx := context.Background()
	reg := memRegistry(nil)
	var swept string
	var sweptWith Credentials
	reg.Register(Registration{Scheme: "sweepy", Open: fileRegistration.Open,
		Sweep: func(_ context.Context, prefix *url.URL, _ time.Time, _ bool, creds Credentials, _ *SweepReport) error {
			swept, sweptWith = prefix.String(), creds
			return nil
		}})
	creds := &memCreds{token: "t0k"}
	if _, err := reg.Sweep(ctx, "sweepy://b/runs/", time.Now(), true, creds); err != nil || swept != "sweepy://b/runs/" || sweptWith != creds {
		t.Errorf("the store's Sweep was not called with the prefix and credentials: %q, %v, %v", swept, sweptWith, err)
	}
	if _, err := reg.Sweep(ctx, "s3a://b/runs/", time.Now(), true, nil); err == nil || !strings.Contains(err.Error(), "sweep: no store this bundle links reads s3a:// URLs") {
		t.Errorf("s3a:// without storage/s3: %v", err)
	}
	if _, err := reg.Sweep(ctx, "mem://b/runs/", time.Now(), true, nil); err == nil || !strings.Contains(err.Error(), "only file://, sweepy:// prefixes can be swept") {
		t.Errorf("mem://: %v", err)
	}
}

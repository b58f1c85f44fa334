package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/internal/randhex"
)

// What a killed worker or a storage outage leaves behind: the temporary
// file a file:// write renames into place (<name>.<hex>.tmp), the staging
// object of a multi-file export (<dest>.<12 hex>.partial, possibly with its
// own .tmp), and on S3 multipart uploads that were never completed (billed,
// and invisible in the bucket listing).
// Matched without regexps, which as package variables would be compiled at
// every task start.
func leftoverTemp(name string) bool { return randhex.Suffixed(name, ".tmp", 8, 16) }

// IsLeftoverPartial reports whether an object's base name is that of an
// export's staging object (<dest>.<12 hex>.partial), for drivers' Sweep.
func IsLeftoverPartial(name string) bool { return randhex.Suffixed(name, ".partial", 12, 12) }

// Leftover kinds.
const (
	LeftoverTempFile  = "temporary file"
	LeftoverPartial   = "partial"
	LeftoverMultipart = "unfinished multipart upload"
)

// Leftover is one piece of an interrupted transfer.
type Leftover struct {
	URL      string    `json:"url"`
	Kind     string    `json:"kind"`
	Size     int64     `json:"size,omitempty"` // -1 when unknown (multipart uploads)
	Since    time.Time `json:"since"`          // modified, or initiated
	UploadID string    `json:"upload_id,omitempty"`
}

// SweepReport is what Sweep found under one prefix and what it removed.
type SweepReport struct {
	Prefix  string     `json:"prefix"`
	Found   []Leftover `json:"found"`
	Removed []string   `json:"removed"`
}

// Sweep finds the leftovers of interrupted transfers under prefix
// (s3://bucket/some/prefix, file:///dir) last touched before cutoff, and
// removes them unless dryRun, reaching the store with creds (parsed by
// FromConnection; nil: its default credentials). Only names this package
// writes are considered; everything else under the prefix is left alone. A
// leftover that could not be removed makes it fail, after trying the
// others. file:// prefixes must lie under FileRootsEnv like any file://
// URL.
func (r *Registry) Sweep(ctx context.Context, prefix string, cutoff time.Time, dryRun bool, creds Credentials) (SweepReport, error) {
	u, err := url.Parse(prefix)
	if err != nil {
		return SweepReport{}, fmt.Errorf("sweep: %q is not a URL prefix such as s3://bucket/prefix or file:///dir: %v", redactURL(prefix), err)
	}
	rep := SweepReport{Prefix: redactURL(prefix), Found: []Leftover{}, Removed: []string{}}
	form := strings.ToLower(u.Scheme)
	if form == "file" {
		return rep, sweepFiles(u, cutoff, dryRun, &rep)
	}
	d, err := r.driverFor(form)
	switch {
	case err != nil:
		err = fmt.Errorf("sweep: %w", err)
	case d.Sweep != nil:
		err = d.Sweep(ctx, u, cutoff, dryRun, creds, &rep)
	default:
		err = fmt.Errorf("sweep: %q: only %s prefixes can be swept", redactURL(prefix), strings.Join(r.sweepable(), ", "))
	}
	return rep, err
}

// sweepable lists the URL schemes whose prefixes Sweep clears: file://
// and the stores that set Registration.Sweep.
func (r *Registry) sweepable() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := []string{"file://"}
	for _, scheme := range slices.Sorted(maps.Keys(r.stores)) {
		if d := r.stores[scheme]; d.Sweep != nil {
			out = append(out, d.forms()[0]+"://")
		}
	}
	return out
}

// SweepFunc is a bucket store's part of Sweep (Registration.Sweep). Under
// prefix, a URL of one of the driver's forms as the user wrote it, it
// finds the leftovers of interrupted transfers last touched before cutoff
// (IsLeftoverPartial objects, and whatever the store keeps of unfinished
// uploads), adds each to rep.Found and, unless dryRun, removes it and adds
// it to rep.Removed. creds are the store's credentials, as for OpenFunc. It
// tries every leftover before failing with SweepFailed's error for those
// it could not remove.
type SweepFunc func(ctx context.Context, prefix *url.URL, cutoff time.Time, dryRun bool, creds Credentials, rep *SweepReport) error

func sweepFiles(u *url.URL, cutoff time.Time, dryRun bool, rep *SweepReport) error {
	if u.Host != "" && u.Host != "localhost" || !strings.HasPrefix(u.Path, "/") {
		return fmt.Errorf("sweep: %q is not a local directory; write it as file:///absolute/dir", u.String())
	}
	dir := filepath.Clean(u.Path)
	fr, rel, err := confine(dir)
	if err != nil {
		return fmt.Errorf("sweep: file://%s: %w", dir, err)
	}
	root, err := fr.open()
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	defer root.Close()
	var failed []string
	// Walking through the root never leaves it: symlinked directories are
	// not followed and a path that resolves outside is refused.
	err = fs.WalkDir(root.FS(), rel, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == rel {
				return fs.SkipAll // nothing was ever written there
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		kind := ""
		switch name := d.Name(); {
		case leftoverTemp(name):
			kind = LeftoverTempFile
		case IsLeftoverPartial(name):
			kind = LeftoverPartial
		default:
			return nil
		}
		fi, err := d.Info()
		if err != nil || !fi.ModTime().Before(cutoff) {
			return nil // gone meanwhile, or maybe still being written
		}
		full := filepath.Join(fr.dir, p)
		rep.Found = append(rep.Found, Leftover{URL: "file://" + full, Kind: kind, Size: fi.Size(), Since: fi.ModTime().UTC()})
		if dryRun {
			return nil
		}
		if err := root.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			failed = append(failed, fmt.Sprintf("%s (%v)", full, unwrapPath(err)))
			return nil
		}
		rep.Removed = append(rep.Removed, "file://"+full)
		return nil
	})
	if err != nil {
		return fmt.Errorf("sweep: walking %s: %v", dir, unwrapPath(err))
	}
	return SweepFailed(failed)
}

// SweepFailed is Sweep's error for the leftovers (each "url (why)") that
// could not be removed; nil when there are none.
func SweepFailed(failed []string) error {
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("sweep could not remove %d leftover(s): %s; run it again, or remove them by hand", len(failed), strings.Join(failed, "; "))
}

// SweepOlderThan is Sweep with a cutoff of age before now.
func (r *Registry) SweepOlderThan(ctx context.Context, prefix string, age time.Duration, dryRun bool, creds Credentials) (SweepReport, error) {
	if age < 0 {
		return SweepReport{}, fmt.Errorf("sweep: the age %v is negative; give how old a leftover must be, e.g. 24h", age)
	}
	return r.Sweep(ctx, prefix, time.Now().Add(-age), dryRun, creds)
}

package tasks

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

// DefaultLeftoverAge is how old a storage leftover must be before sweep
// removes it when older_than is not set: long past any transfer still
// running, so a sweep never cuts one short.
const DefaultLeftoverAge = 24 * time.Hour

// sweepStorage removes, under each of in.Storage's URL prefixes, what
// interrupted transfers left: temporary files beside file:// destinations,
// .partial staging objects, and unfinished S3 multipart uploads, older than
// in.OlderThan. It tries every prefix before reporting a failure.
func sweepStorage(ctx context.Context, d Deps, in SweepInput) ([]storage.SweepReport, error) {
	d, done := d.withStorage()
	defer done()
	age := time.Duration(in.OlderThan)
	if age == 0 {
		age = DefaultLeftoverAge
	}
	// Only s3:// prefixes take a connection: storage_conn_id, or the one a
	// prefix names (s3://conn_id@bucket/prefix).
	connID, by := in.StorageConnID, "storage_conn_id"
	for _, p := range in.Storage {
		u, err := url.Parse(p)
		if err != nil || u.User == nil {
			continue
		}
		if c := u.User.Username(); c != connID {
			if connID != "" {
				return nil, final.Errorf("%s is %q but %s names connection %q; sweep one connection's prefixes at a time", by, connID, storage.RedactURL(p), c)
			}
			connID, by = c, storage.RedactURL(p)
		}
	}
	var creds storage.Credentials
	if connID != "" {
		c, err := resolveConn(ctx, d, "storage_conn_id", "s3", connID, by)
		if err != nil {
			return nil, err
		}
		creds = c
	}
	reg := d.Storage.Registry()
	log := d.logger()
	reports := []storage.SweepReport{}
	var firstErr error
	for _, p := range in.Storage {
		rep, err := reg.SweepOlderThan(ctx, p, age, in.DryRun, creds)
		for _, l := range rep.Found {
			verb := "removed"
			if in.DryRun {
				verb = "would remove"
			}
			log.Info(verb, "url", l.URL, "kind", l.Kind, "since", l.Since.Format(time.RFC3339), "bytes", l.Size)
		}
		if rep.Prefix != "" {
			reports = append(reports, rep)
			log.Info("storage swept", "prefix", rep.Prefix, "older_than", age.String(), "found", len(rep.Found), "removed", len(rep.Removed), "dry_run", in.DryRun)
		}
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("storage %s: %w", p, err)
		}
	}
	return reports, firstErr
}

package tasks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

// NewStorage is a storage handle for one task instance's transfers
// (Deps.Storage) on the stores of reg (nil: those the bundle links,
// storage.Default). Its own progress lines are off: the tasks log progress
// naming both ends of each transfer. Close it when the task ends.
func NewStorage(reg *storage.Registry) *storage.Handle {
	if reg == nil {
		reg = storage.Default
	}
	return reg.NewHandle(storage.Options{ProgressEvery: -1})
}

// withStorage is d with a storage handle: Deps.Storage, or, when that is
// nil, one of the call's own on Deps.Stores, which done closes.
func (d Deps) withStorage() (Deps, func()) {
	if d.Storage != nil {
		return d, func() {}
	}
	d.Storage = NewStorage(d.Stores)
	return d, func() { _ = d.Storage.Close() } // it releases clients; the call's outcome stands
}

// parseFn is how a field's URLs are read: Registry.Parse for objects,
// Registry.ParsePrefix for a listing's prefixes.
type parseFn func(*storage.Registry, string) (storage.Location, error)

// parseURLs is where a field's URLs enter (placeholders filled in): each
// is checked and parsed once, here, and the Locations are what the rest of
// the task uses. An empty sandbox path, or a URL that is none or that no
// linked store reads, is refused before anything is provisioned or copied.
func parseURLs(d Deps, field string, m map[string]string, parse parseFn) (map[string]storage.Location, error) {
	out := make(map[string]storage.Location, len(m))
	for _, p := range slices.Sorted(maps.Keys(m)) {
		if strings.TrimSpace(p) == "" {
			return nil, final.Errorf("%s: an entry has an empty sandbox path", field)
		}
		loc, err := parse(d.Storage.Registry(), m[p])
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", field, p, err)
		}
		out[p] = loc
	}
	return out, nil
}

// parseOne is parseURLs for one URL, what names it in errors.
func parseOne(d Deps, what, raw string, parse parseFn) (storage.Location, error) {
	loc, err := parse(d.Storage.Registry(), raw)
	if err != nil {
		return storage.Location{}, fmt.Errorf("%s: %w", what, err)
	}
	return loc, nil
}

// resolveStorage chooses and reads the connections a field's Locations
// need. field (e.g. export_conn_id) names connID, which applies to every
// Location whose URL names no connection itself
// (scheme://conn_id@bucket/key). Each connection must be of the type its
// store needs, and each store gets one connection per field: one transfer
// runs with one identity per store, and guessing would write with the
// wrong one. A store with no connection uses its default chain. It returns
// the Locations with the connection each is reached with (ConnID).
func resolveStorage(ctx context.Context, d Deps, field, connID string, locs map[string]storage.Location) (map[string]storage.Location, error) {
	byScheme := map[string]string{} // store -> connection id
	namedBy := map[string]string{}  // store -> the URL or field that chose it
	out := make(map[string]storage.Location, len(locs))
	for _, p := range slices.Sorted(maps.Keys(locs)) {
		loc := locs[p]
		out[p] = loc
		if loc.Scheme == "file" {
			continue
		}
		id, by := connID, field
		switch {
		case loc.ConnID == "":
		case connID != "" && loc.ConnID != connID:
			return nil, final.Errorf("%s is %q but %s names connection %q; use one connection", field, connID, loc, loc.ConnID)
		default:
			id, by = loc.ConnID, loc.String()
		}
		if prev, ok := byScheme[loc.Scheme]; ok && prev != id {
			return nil, final.Errorf("%s and %s choose two connections for %s://, %q and %q; one task transfers with one connection per store, so split it or use %s",
				namedBy[loc.Scheme], by, loc.Scheme, prev, id, field)
		}
		byScheme[loc.Scheme], namedBy[loc.Scheme] = id, by
		loc.ConnID = id
		out[p] = loc
	}
	if err := checkUnusedConn(ctx, d, field, connID, byScheme); err != nil {
		return nil, err
	}
	for _, scheme := range slices.Sorted(maps.Keys(byScheme)) {
		if id := byScheme[scheme]; id != "" {
			if _, err := resolveConn(ctx, d, field, scheme, id, namedBy[scheme]); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// checkUnusedConn reports a field's connection that no URL needs when it
// does not exist: a misspelt id is still worth reporting now.
func checkUnusedConn(ctx context.Context, d Deps, field, connID string, byScheme map[string]string) error {
	if connID == "" || slices.Contains(slices.Collect(maps.Values(byScheme)), connID) {
		return nil
	}
	if _, err := d.Airflow.GetConnection(ctx, connID); errors.Is(err, connections.ErrNotFound) {
		return final.Errorf("%s: Airflow connection %q does not exist; create it or remove %s", field, connID, field)
	}
	return nil
}

// resolveConn reads connection id for store scheme, parsed by the store's
// driver, registers its secrets with the masker and gives it to the task's
// storage handle, once per task: a connection the handle has is not read
// again. by names what chose it, for errors.
func resolveConn(ctx context.Context, d Deps, field, scheme, id, by string) (storage.Credentials, error) {
	if c, ok := d.Storage.Credentials(scheme, id); ok {
		return c, nil
	}
	reg := d.Storage.Registry()
	conn, err := d.Airflow.GetConnection(ctx, id)
	if errors.Is(err, connections.ErrNotFound) {
		return nil, final.Errorf("%s: Airflow connection %q does not exist; create it (type %s) or remove it to use the worker's default %s credentials", by, id, reg.ConnType(scheme), scheme)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: reading Airflow connection %q: %w", by, id, err)
	}
	cfg, err := reg.FromConnection(scheme, conn)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", by, err)
	}
	if err := maskSecrets(ctx, d, id, cfg.Secrets()); err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	d.Storage.Connect(scheme, id, cfg)
	return cfg, nil
}

// maskSecrets registers a connection's credentials with Airflow's secret
// masker, so that whatever might echo them (an SDK error, a debug line)
// shows *** in the task log.
func maskSecrets(ctx context.Context, d Deps, connID string, secrets map[string]string) error {
	for _, what := range slices.Sorted(maps.Keys(secrets)) {
		v := secrets[what]
		if v == "" {
			continue
		}
		if err := d.Airflow.MaskSecret(ctx, v, connID+" "+what); err != nil {
			return fmt.Errorf("registering the %s of connection %q with Airflow's secret masker failed (%v); refusing to use an unmasked credential", what, connID, err)
		}
	}
	return nil
}

// checkStorage asks each Location's store whether it can be used, so that
// a missing bucket fails the task before a sandbox is paid for.
func checkStorage(ctx context.Context, d Deps, field string, locs map[string]storage.Location, forRead bool) error {
	for _, p := range slices.Sorted(maps.Keys(locs)) {
		if err := d.Storage.Check(ctx, locs[p], forRead); err != nil {
			return fmt.Errorf("%s[%q]: %w", field, p, err)
		}
	}
	return nil
}

// objectAt is url, a Go task's object URL, with the run filled in, parsed
// and its connection (connID, or the one the URL names; none means the
// store's default chain) resolved.
func objectAt(ctx context.Context, d Deps, url, connID string) (storage.Location, error) {
	url, err := d.Run.expandURL(url)
	if err != nil {
		return storage.Location{}, err
	}
	loc, err := parseOne(d, "object", url, (*storage.Registry).Parse)
	if err != nil {
		return storage.Location{}, err
	}
	locs, err := resolveStorage(ctx, d, "conn_id", connID, map[string]storage.Location{"object": loc})
	if err != nil {
		return storage.Location{}, err
	}
	return locs["object"], nil
}

// OpenObject streams the object at url for a Go task: its connection
// (connID, or the one the URL names; none means the store's default
// chain) is read through d.Airflow and its secrets registered with the
// masker, as the catalogue's own transfers do. {dag_id}, {run_id},
// {task_id} and {map_index} in url are filled in as in stage_in and
// exports. The caller closes it.
func OpenObject(ctx context.Context, d Deps, url, connID string) (io.ReadCloser, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	d, done := d.withStorage()
	loc, err := objectAt(ctx, d, url, connID)
	if err != nil {
		done()
		return nil, err
	}
	rc, err := d.Storage.Open(ctx, loc)
	if err != nil {
		done()
		return nil, err
	}
	return closeAlso{rc, done}, nil
}

// closeAlso runs done once its reader is closed: a handle of the call's
// own lives as long as the object it opened is read.
type closeAlso struct {
	io.ReadCloser
	done func()
}

func (c closeAlso) Close() error {
	err := c.ReadCloser.Close()
	c.done()
	return err
}

// PutObject writes size bytes from r to url, all or nothing, with the
// connection chosen and placeholders filled in as for OpenObject, and
// returns the URL written.
func PutObject(ctx context.Context, d Deps, url string, r io.Reader, size int64, connID string) (string, error) {
	if err := d.check(); err != nil {
		return "", err
	}
	d, done := d.withStorage()
	defer done()
	loc, err := objectAt(ctx, d, url, connID)
	if err != nil {
		return "", err
	}
	// A one-file export: a stream of another length than size fails
	// before anything lands.
	x := d.Storage.NewExport()
	if _, err := x.Stage(ctx, loc, r, size); err != nil {
		return "", errors.Join(err, x.Abort(context.WithoutCancel(ctx)))
	}
	urls, err := x.Commit(ctx)
	if err != nil {
		return "", errors.Join(err, x.Abort(context.WithoutCancel(ctx)))
	}
	if len(urls) != 1 {
		return "", fmt.Errorf("writing %s: the store reported %d objects written", loc, len(urls))
	}
	return urls[0], nil
}

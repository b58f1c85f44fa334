package tasks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"maps"
	"slices"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/cleanup"
	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

// DefaultMaxExportBytes is the per-file export budget, as in Python.
const DefaultMaxExportBytes int64 = 1 << 30

// ExportInput maps sandbox paths to destination URLs.
type ExportInput struct {
	// BackendOptions locate the sandbox (backend, conn_id and
	// backend_options); a Record given as Sandbox supplies the first two.
	BackendOptions
	Sandbox SandboxRef `json:"sandbox"`
	// Exports maps a sandbox path (relative paths resolve against the
	// workdir) to a destination URL (s3://bucket/key, file:///path). URLs
	// may use {dag_id}, {run_id}, {task_id} and {map_index}.
	Exports map[string]string `json:"exports"`
	// ExportConnID is the connection for destinations whose URL names none:
	// aws for s3://, google_cloud_platform for gs://, wasb for abfs://.
	ExportConnID string `json:"export_conn_id,omitempty"`
	// MaxBytes is the per-file budget; default 1 GiB.
	MaxBytes int64  `json:"max_bytes,omitempty"`
	Owner    string `json:"owner,omitempty"`
	// SHA256 computes each exported file's SHA-256 as it streams, for the
	// log and the asset outlet event's extra (one more pass over every
	// byte, so off unless asked for).
	SHA256 bool `json:"sha256,omitempty"`
}

// ExportedFile is one file an export landed, as the task's asset outlet
// events describe it (Deps.OnExported).
type ExportedFile struct {
	URL    string `json:"url"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256,omitempty"`
}

// Export copies files out of a sandbox. Every file is staged next to its
// destination first; only when all are staged are they moved into place, so
// a failure leaves no destination half-written. It returns the URLs written.
func Export(ctx context.Context, d Deps, in ExportInput) ([]string, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	d, done := d.withStorage()
	defer done()
	plan, err := planExport(ctx, d, in.Exports, in.ExportConnID, in.MaxBytes)
	if err != nil {
		return nil, err
	}
	plan.sha256 = in.SHA256
	sb, backend, _, err := openRef(ctx, d, in.BackendOptions, in.Sandbox, in.Owner)
	if err != nil {
		return nil, err
	}
	defer backend.Close()
	return exportFrom(ctx, d, sb, plan)
}

// exportPlan is an export whose settings were checked and resolved before
// any byte moves: the destinations (the run filled in, parsed, each with
// the connection it is written with) and the byte budget.
type exportPlan struct {
	exports  map[string]storage.Location
	maxBytes int64
	sha256   bool
}

// planExport checks an export's settings, resolves its connections and asks
// each destination's store whether it can be written (its bucket exists,
// the credentials reach it), so that a mistake is reported before a sandbox
// is paid for (convert) and names the setting at fault.
func planExport(ctx context.Context, d Deps, exports map[string]string, connID string, maxBytes int64) (exportPlan, error) {
	if len(exports) == 0 {
		return exportPlan{}, final.Errorf("exports: nothing to export; map sandbox paths to URLs, e.g. {report.json: s3://bucket/report.json}")
	}
	if maxBytes == 0 {
		maxBytes = DefaultMaxExportBytes
	}
	if maxBytes < 0 {
		return exportPlan{}, final.Errorf("max_bytes: %d is negative; give a byte budget such as 1073741824", maxBytes)
	}
	exports, err := d.Run.expandURLs("exports", exports)
	if err != nil {
		return exportPlan{}, err
	}
	dests, err := parseURLs(d, "exports", exports, (*storage.Registry).Parse)
	if err != nil {
		return exportPlan{}, err
	}
	if dests, err = resolveStorage(ctx, d, "export_conn_id", connID, dests); err != nil {
		return exportPlan{}, fmt.Errorf("exports: %w", err)
	}
	if err := checkStorage(ctx, d, "exports", dests, false); err != nil {
		return exportPlan{}, err
	}
	return exportPlan{exports: dests, maxBytes: maxBytes}, nil
}

// exportFrom is the export shared by Export, Collect and Convert.
func exportFrom(ctx context.Context, d Deps, sb *sandbox.Sandbox, plan exportPlan) ([]string, error) {
	log := d.logger()
	exp := d.Storage.NewExport()
	abort := func(err error) ([]string, error) {
		actx, cancel := cleanup.Context(ctx, cleanupTimeout)
		defer cancel()
		if aerr := exp.Abort(actx); aerr != nil {
			return nil, fmt.Errorf("%w; removing the staged files also failed: %v", err, aerr)
		}
		return nil, err
	}
	var files []ExportedFile
	for _, p := range slices.Sorted(maps.Keys(plan.exports)) {
		dest := plan.exports[p]
		f, err := stageOut(ctx, d, sb, exp, p, dest, plan.maxBytes, plan.sha256)
		if err != nil {
			return abort(fmt.Errorf("could not export %s from sandbox %s to %s: %w", p, sb.ID(), dest, err))
		}
		files = append(files, f)
	}
	urls, err := exp.Commit(ctx)
	if err != nil {
		return nil, fmt.Errorf("moving the exports into place: %w", err)
	}
	for i, u := range urls {
		if len(urls) == len(files) {
			// Commit lands the files in the order they were staged.
			files[i].URL = u
		}
		log.Info("exported", "url", u)
	}
	if d.OnExported != nil {
		for i := range files {
			files[i].URL = storage.RedactURL(files[i].URL)
		}
		d.OnExported(files)
	}
	return urls, nil
}

// stageOut checks one file and streams it to its staging object, hashing
// it on the way when withSHA256.
func stageOut(ctx context.Context, d Deps, sb *sandbox.Sandbox, exp *storage.Export, p string, dest storage.Location, maxBytes int64, withSHA256 bool) (ExportedFile, error) {
	st, err := sb.Stat(ctx, p)
	if errors.Is(err, sandbox.ErrNotFound) {
		return ExportedFile{}, final.Errorf("the file does not exist; make the command write it, or remove it from exports")
	}
	if err != nil {
		return ExportedFile{}, err
	}
	switch {
	case st.IsDir():
		return ExportedFile{}, final.Errorf("it is a directory; export each file inside it, or archive it first (tar czf out.tgz dir)")
	case st.Mode&fs.ModeSymlink != 0:
		return ExportedFile{}, final.Errorf("it is a symbolic link; export the file it points to")
	case !st.IsRegular():
		return ExportedFile{}, final.Errorf("it is not a regular file (mode %v); only regular files are exported", st.Mode)
	case st.Size > maxBytes:
		return ExportedFile{}, final.Errorf("it is %d bytes, over the %d-byte max_bytes budget; raise max_bytes or make the file smaller", st.Size, maxBytes)
	}
	rc, size, err := sb.OpenFile(ctx, p, maxBytes)
	if err != nil {
		return ExportedFile{}, err
	}
	defer rc.Close()
	log := d.logger()
	log.Info("exporting", "from", p, "to", dest.String(), "bytes", size)
	pr := storage.StartProgress(log, ProgressEvery, "what", p+" -> "+dest.String(), "of", size)
	defer pr.Finish()
	r := pr.Reader(rc)
	var h hash.Hash
	if withSHA256 {
		h = sha256.New()
		r = io.TeeReader(r, h)
	}
	// A file:// destination gets the file's permissions, never wider ones.
	w, err := exp.Stage(storage.WithFileMode(ctx, st.Mode.Perm()), dest, r, size)
	if err != nil {
		return ExportedFile{}, err
	}
	pr.Finish()
	f := ExportedFile{URL: w.URL, Bytes: w.Size}
	if h == nil {
		log.Info("staged", "from", p, "to", w.URL, "bytes", w.Size)
		return f, nil
	}
	f.SHA256 = hex.EncodeToString(h.Sum(nil))
	log.Info("staged", "from", p, "to", w.URL, "bytes", w.Size, "sha256", f.SHA256)
	return f, nil
}

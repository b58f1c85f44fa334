package tasks

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

func writeIn(t *testing.T, e *env, id, p, content string) {
	t.Helper()
	if err := e.drv.WriteFile(context.Background(), id, p, strings.NewReader(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestExportStagesAllThenCommits(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	t.Setenv(storage.FileRootsEnv, dir)
	id := provisioned(t, e)
	writeIn(t, e, id, "/workspace/a.txt", "AAA")
	writeIn(t, e, id, "/workspace/out/b.txt", "BBBB")
	e.st.beforeStage = func(string) {
		if _, err := os.Stat(filepath.Join(dir, "x", "b.txt")); err == nil {
			t.Error("b.txt landed before every file was staged")
		}
	}
	urls, err := Export(context.Background(), e.deps, ExportInput{Sandbox: SandboxRef{ID: id}, Exports: map[string]string{
		"a.txt": "s3://out/a.txt", "/workspace/out/b.txt": "file://" + dir + "/x/b.txt"}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(urls, " ") != "file://"+dir+"/x/b.txt s3://out/a.txt" {
		t.Fatalf("urls %v", urls)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "x", "b.txt")); string(e.st.objects["s3://out/a.txt"]) != "AAA" || string(b) != "BBBB" {
		t.Fatalf("objects %v, b.txt %q", e.st.objects, b)
	}
	if len(e.st.staged) != 0 {
		t.Fatalf("staging left behind: %v", e.st.staged)
	}
}

func TestExportRefusals(t *testing.T) {
	e := newEnv(t)
	id := provisioned(t, e)
	writeIn(t, e, id, "/workspace/big.bin", strings.Repeat("x", 100))
	writeIn(t, e, id, "/workspace/ok.txt", "ok")
	if err := os.MkdirAll(e.drv.host(id, "/workspace/dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", e.drv.host(id, "/workspace/link")); err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		"big.bin": "over the 10-byte max_bytes budget",
		"dir":     "is a directory",
		"link":    "symbolic link",
		"nope":    "does not exist",
	}
	for path, want := range cases {
		t.Run(path, func(t *testing.T) {
			_, err := Export(context.Background(), e.deps, ExportInput{Sandbox: SandboxRef{ID: id}, MaxBytes: 10,
				Exports: map[string]string{"ok.txt": "s3://out/ok.txt", path: "s3://out/" + path}})
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("want error naming %s and %q, got %v", path, want, err)
			}
			if len(e.st.objects) != 0 || len(e.st.staged) != 0 {
				t.Fatalf("a refused export left objects %v / staged %v", e.st.objects, e.st.staged)
			}
		})
	}
	for _, bad := range []map[string]string{nil, {"a": "not-a-url"}, {"": "s3://b/k"}} {
		if _, err := Export(context.Background(), e.deps, ExportInput{Sandbox: SandboxRef{ID: id}, Exports: bad}); err == nil {
			t.Errorf("exports %v must be refused", bad)
		}
	}
	if _, err := Export(context.Background(), e.deps, ExportInput{Sandbox: SandboxRef{ID: id}, MaxBytes: -1, Exports: map[string]string{"ok.txt": "s3://o/k"}}); err == nil {
		t.Error("negative max_bytes must be refused")
	}
}

func TestExportFailureMidwayLeavesNothing(t *testing.T) {
	e := newEnv(t)
	id := provisioned(t, e)
	writeIn(t, e, id, "/workspace/1.txt", "one")
	writeIn(t, e, id, "/workspace/2.txt", "two")
	e.st.failStage["s3://out/2.txt"] = errors.New("connection reset")
	_, err := Export(context.Background(), e.deps, ExportInput{Sandbox: SandboxRef{ID: id},
		Exports: map[string]string{"1.txt": "s3://out/1.txt", "2.txt": "s3://out/2.txt"}})
	if err == nil || !strings.Contains(err.Error(), "connection reset") || !strings.Contains(err.Error(), "2.txt") {
		t.Fatalf("want the stage error naming the file, got %v", err)
	}
	if len(e.st.objects) != 0 || len(e.st.staged) != 0 || e.st.aborts != 1 {
		t.Fatalf("objects %v, staged %v, aborts %d: want nothing left and one abort", e.st.objects, e.st.staged, e.st.aborts)
	}
}

func TestCollectDestroysEvenWhenExportFails(t *testing.T) {
	e := newEnv(t)
	id := provisioned(t, e)
	_, err := Collect(context.Background(), e.deps, CollectInput{Sandbox: SandboxRef{ID: id}, Exports: map[string]string{"missing.txt": "s3://out/m"}})
	if err == nil || !strings.Contains(err.Error(), "missing.txt") {
		t.Fatalf("want the export error, got %v", err)
	}
	if alive := e.drv.alive(); len(alive) != 0 {
		t.Fatalf("collect left %v alive", alive)
	}
}

// A file that something in the sandbox rewrites while it streams out is
// not landed: the bytes staged would be neither its old nor its new content.
func TestExportRefusesAFileThatChangedWhileItStreamed(t *testing.T) {
	e := newEnv(t)
	id := provisioned(t, e)
	writeIn(t, e, id, "/workspace/a.txt", "AAA")
	writeIn(t, e, id, "/workspace/log.txt", "a long line that is still being rewritten\n")
	e.st.beforeStage = func(dest string) {
		if strings.HasSuffix(dest, "log.txt") {
			if err := os.Truncate(e.drv.host(id, "/workspace/log.txt"), 6); err != nil {
				t.Error(err)
			}
		}
	}
	_, err := Export(context.Background(), e.deps, ExportInput{Sandbox: SandboxRef{ID: id},
		Exports: map[string]string{"a.txt": "s3://out/a.txt", "log.txt": "s3://out/log.txt"}})
	if err == nil || !strings.Contains(err.Error(), "changed while it was exported") || !strings.Contains(err.Error(), "log.txt") {
		t.Fatalf("want the change reported, naming the file: %v", err)
	}
	if len(e.st.objects) != 0 || len(e.st.staged) != 0 {
		t.Fatalf("a changed file was landed: objects %v, staged %v", e.st.objects, e.st.staged)
	}
}

// Collect runs as a teardown, whatever upstream did: a mistake in its export settings must not
// leave the sandbox running until its lifetime ends.
func TestCollectDestroysWhenTheExportSettingsAreWrong(t *testing.T) {
	cases := map[string]CollectInput{
		"not a URL":          {Exports: map[string]string{"r.md": "reports/r.md"}},
		"empty path":         {Exports: map[string]string{"": "s3://out/r.md"}},
		"negative max_bytes": {Exports: map[string]string{"r.md": "s3://out/r.md"}, MaxBytes: -1},
		"missing connection": {Exports: map[string]string{"r.md": "s3://out/r.md"}, ExportConnID: "nope"},
		"two connections":    {Exports: map[string]string{"a": "s3://lake@out/a", "b": "s3://sea@out/b"}},
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			in.Sandbox = SandboxRef{ID: provisioned(t, e)}
			if _, err := Collect(context.Background(), e.deps, in); err == nil {
				t.Fatal("want the settings refused")
			}
			if alive := e.drv.alive(); len(alive) != 0 {
				t.Fatalf("collect left %v alive", alive)
			}
		})
	}
}

// Without exports collect is a destroy, and like destroy it is idempotent.
func TestCollectWithoutExportsOfAGoneSandboxSucceeds(t *testing.T) {
	e := newEnv(t)
	id := provisioned(t, e)
	for i := 0; i < 2; i++ {
		if urls, err := Collect(context.Background(), e.deps, CollectInput{Sandbox: SandboxRef{ID: id}}); err != nil || len(urls) != 0 {
			t.Fatalf("collect #%d: %v, %v", i+1, urls, err)
		}
	}
	if alive := e.drv.alive(); len(alive) != 0 {
		t.Fatalf("still alive: %v", alive)
	}
}

func TestCollectExportsThenDestroysAndOnlyLogsAFailedDestroy(t *testing.T) {
	e := newEnv(t)
	id := provisioned(t, e)
	writeIn(t, e, id, "/workspace/report.md", "# done")
	e.drv.failDestroy = errors.New("modal api 503")
	urls, err := Collect(context.Background(), e.deps, CollectInput{Sandbox: SandboxRef{ID: id}, Exports: map[string]string{"report.md": "s3://out/report.md"}})
	if err != nil || len(urls) != 1 || string(e.st.objects["s3://out/report.md"]) != "# done" {
		t.Fatalf("collect: %v, %v, %v", urls, err, e.st.objects)
	}
	if !strings.Contains(e.log.String(), "modal api 503") {
		t.Errorf("the failed destroy was not logged:\n%s", e.log.String())
	}
	e.drv.failDestroy = nil
	if _, err := Collect(context.Background(), e.deps, CollectInput{Sandbox: SandboxRef{ID: id}}); err != nil {
		t.Fatal(err)
	}
	if alive := e.drv.alive(); len(alive) != 0 {
		t.Fatalf("collect without exports must still destroy; alive %v", alive)
	}
	_, err = Collect(context.Background(), e.deps, CollectInput{Sandbox: SandboxRef{ID: id}, Exports: map[string]string{"report.md": "s3://out/r2"}})
	if err == nil || !strings.Contains(err.Error(), "none of the files") {
		t.Fatalf("collecting a gone sandbox must say the files are lost: %v", err)
	}
}

func TestConvert(t *testing.T) {
	e := newEnv(t)
	e.st.objects["s3://in/doc.txt"] = []byte("hello world\n")
	in := decodeInput[ConvertInput](t, `{
		"stage_in": {"in/doc.txt": "s3://in/doc.txt"},
		"command": "tr a-z A-Z < in/doc.txt > out.txt",
		"exports": {"out.txt": "s3://out/doc.upper.txt"}}`)
	res, err := Convert(context.Background(), e.deps, in)
	if err != nil {
		t.Fatal(err)
	}
	if string(e.st.objects["s3://out/doc.upper.txt"]) != "HELLO WORLD\n" || len(res.URLs) != 1 {
		t.Fatalf("result %+v, objects %v", res, e.st.objects)
	}
	if alive := e.drv.alive(); len(alive) != 0 {
		t.Fatalf("convert left %v alive", alive)
	}

	in.Command = Commands{"echo partial > out.txt; echo broken >&2; exit 2"}
	res, err = Convert(context.Background(), e.deps, in)
	if err == nil || res.ExitCode != 2 || !strings.Contains(err.Error(), "nothing was exported") || !strings.Contains(err.Error(), "broken") {
		t.Fatalf("a failing conversion: %+v, %v", res, err)
	}
	if string(e.st.objects["s3://out/doc.upper.txt"]) != "HELLO WORLD\n" {
		t.Fatal("a failed conversion overwrote the previous output")
	}
	if alive := e.drv.alive(); len(alive) != 0 {
		t.Fatalf("failed convert left %v alive", alive)
	}
	if _, err := Convert(context.Background(), e.deps, ConvertInput{Command: Commands{"true"}}); err == nil || len(e.drv.creates) != 2 {
		t.Fatalf("convert without exports must fail before creating: %v (creates %d)", err, len(e.drv.creates))
	}
}

// A conversion whose outputs cannot be written is refused before a
// sandbox is created and the command run.
func TestConvertChecksTheExportSettingsBeforeProvisioning(t *testing.T) {
	base := ConvertInput{Command: Commands{"echo hi > out.txt"}, Exports: map[string]string{"out.txt": "s3://out/o.txt"}}
	cases := map[string]func(*ConvertInput){
		"missing export connection": func(in *ConvertInput) { in.ExportConnID = "nope" },
		"negative max_bytes":        func(in *ConvertInput) { in.MaxBytes = -5 },
		"URL names another conn": func(in *ConvertInput) {
			in.ExportConnID = "a"
			in.Exports = map[string]string{"out.txt": "s3://b@out/o.txt"}
		},
		"connection of the wrong type": func(in *ConvertInput) {
			in.ExportConnID = "a"
			in.Exports = map[string]string{"out.txt": "gs://out/o.txt"}
		},
		"bucket that does not exist": func(in *ConvertInput) {
			in.Exports = map[string]string{"out.txt": "s3://nobucket/o.txt"}
		},
	}
	for name, mod := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.af.conns["a"] = connections.Connection{ConnID: "a", ConnType: "aws"}
			e.st.noBucket["s3://nobucket"] = true
			in := base
			mod(&in)
			if _, err := Convert(context.Background(), e.deps, in); err == nil {
				t.Fatal("want the settings refused")
			}
			if len(e.drv.creates) != 0 {
				t.Fatalf("a sandbox was created for a conversion that could not export")
			}
		})
	}
}

func TestStorageConnectionFromTheURL(t *testing.T) {
	aws := func(id string) connections.Connection { return connections.Connection{ConnID: id, ConnType: "aws"} }
	gcp := connections.Connection{ConnID: "gcp", ConnType: "google_cloud_platform", Extra: `{"is_anonymous": true}`}
	wasb := connections.Connection{ConnID: "wasb", ConnType: "wasb", Login: "acct", Password: "a2V5"}
	cases := []struct {
		field string
		urls  map[string]string
		want  string // which stores got a connection, e.g. "s3,gs"
		err   string
	}{
		{"", map[string]string{"a": "s3://b/k"}, "", ""},
		{"", map[string]string{"a": "s3://lake@b/k", "b": "file:///x"}, "s3", ""},
		{"lake", map[string]string{"a": "s3://lake@b/k"}, "s3", ""},
		{"aws_default", map[string]string{"a": "s3://lake@b/k"}, "", `names connection "lake"`},
		{"", map[string]string{"a": "s3://lake@b/k", "b": "s3://sea@b/k"}, "", "two connections"},
		// One connection per store: mixed stores each with their own.
		{"", map[string]string{"a": "s3://lake@b/k", "b": "gs://gcp@b/k", "c": "abfs://wasb@c/k"}, "s3,gs,az", ""},
		// A connection of the wrong type for the store is named, with the type wanted.
		{"lake", map[string]string{"a": "gs://b/k"}, "", `"lake" has type "aws", not google_cloud_platform`},
		{"", map[string]string{"a": "abfs://gcp@c/k"}, "", `"gcp" has type "google_cloud_platform", not wasb`},
		{"", map[string]string{"a": "s3://wasb@b/k"}, "", `"wasb" has type "wasb", not aws`},
		// adlfs's account form: the user part is the container, not a connection.
		{"", map[string]string{"a": "abfs://cont@acct.dfs.core.windows.net/k"}, "", ""},
		{"", map[string]string{"a": "gs://nosuch@b/k"}, "", "type google_cloud_platform"},
	}
	for _, c := range cases {
		e := newEnv(t)
		for _, conn := range []connections.Connection{aws("lake"), aws("sea"), aws("aws_default"), gcp, wasb} {
			e.af.conns[conn.ConnID] = conn
		}
		h, locs, err := resolveURLs(e, "export_conn_id", c.field, c.urls)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: want error %q, got %v", c.urls, c.err, err)
			}
			continue
		}
		var got []string
		for _, scheme := range []string{"s3", "gs", "az"} {
			for _, loc := range locs {
				if c, _ := h.Credentials(scheme, loc.ConnID); loc.Scheme == scheme && c != nil {
					got = append(got, scheme)
					break
				}
			}
		}
		if err != nil || strings.Join(got, ",") != c.want {
			t.Errorf("%v with %q: got %v, %v; want %q", c.urls, c.field, got, err, c.want)
		}
	}
}

// resolveURLs parses urls and resolves their connections through a
// storage handle on e's stores, as a task does; it returns the handle and
// the Locations, each with the connection it is reached with.
func resolveURLs(e *env, field, connID string, urls map[string]string) (*storage.Handle, map[string]storage.Location, error) {
	d := e.deps
	d.Storage = NewStorage(d.Stores)
	locs, err := parseURLs(d, "urls", urls, (*storage.Registry).Parse)
	if err != nil {
		return d.Storage, nil, err
	}
	locs, err = resolveStorage(context.Background(), d, field, connID, locs)
	return d.Storage, locs, err
}

func TestExportResolvesTheConnectionTheURLNames(t *testing.T) {
	e := newEnv(t)
	id := provisioned(t, e)
	writeIn(t, e, id, "/workspace/a.txt", "A")
	_, err := Export(context.Background(), e.deps, ExportInput{Sandbox: SandboxRef{ID: id}, Exports: map[string]string{"a.txt": "s3://lake@out/a.txt"}})
	if err == nil || !strings.Contains(err.Error(), `"lake"`) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("the URL's connection must be looked up (and its absence reported): %v", err)
	}
	e.af.conns["lake"] = connections.Connection{ConnID: "lake", ConnType: "aws"}
	if _, err := Export(context.Background(), e.deps, ExportInput{Sandbox: SandboxRef{ID: id}, Exports: map[string]string{"a.txt": "s3://lake@out/a.txt"}}); err != nil {
		t.Fatal(err)
	}
}

// The credentials a task reads for storage and for its backend are
// registered with Airflow's masker, as the architecture's credentials
// contract asks, even though they never enter the sandbox.
func TestConnectionCredentialsAreMasked(t *testing.T) {
	e := newEnv(t)
	e.af.conns["lake"] = connections.Connection{ConnID: "lake", ConnType: "aws", Login: "AKIAEXAMPLE", Password: "aws-secret-123",
		Extra: `{"aws_session_token": "aws-session-456"}`}
	e.af.conns["modal_default"] = connections.Connection{ConnID: "modal_default", ConnType: "modal", Login: "ak-1", Password: "as-modal-789"}
	// Each store's driver says which of its connection's values are secret.
	e.af.conns["gcp"] = connections.Connection{ConnID: "gcp", ConnType: "google_cloud_platform",
		Extra: `{"keyfile_dict": {"type": "service_account", "client_email": "sa@p.iam.gserviceaccount.com", "private_key": "gcp-private-key-321"}}`}
	e.af.conns["wasb"] = connections.Connection{ConnID: "wasb", ConnType: "wasb", Login: "acct", Password: "azure-key-654"}
	urls := map[string]string{"a": "s3://lake@b/k", "b": "gs://gcp@b/k", "c": "abfs://wasb@c/k"}
	if _, _, err := resolveURLs(e, "export_conn_id", "", urls); err != nil {
		t.Fatal(err)
	}
	if _, err := resolveBackendRequest(context.Background(), e.deps, BackendOptions{Backend: "modal"}); err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"aws-secret-123", "aws-session-456", "as-modal-789", "gcp-private-key-321", "azure-key-654"} {
		if !slices.Contains(e.af.masked, secret) {
			t.Errorf("%s was not registered with the masker (masked: %d values)", secret, len(e.af.masked))
		}
	}
	if slices.Contains(e.af.masked, "AKIAEXAMPLE") {
		t.Error("the access key id is an identifier, not a secret; masking it would garble logs that name it")
	}
}

func TestURLsExpandTheRun(t *testing.T) {
	e := newEnv(t)
	e.st.objects["s3://in/dag_a/input.txt"] = []byte("in")
	id, err := Provision(context.Background(), e.deps, ProvisionInput{StageIn: map[string]string{"input.txt": "s3://in/{dag_id}/input.txt"}})
	if err != nil {
		t.Fatal(err)
	}
	writeIn(t, e, id, "/workspace/out.txt", "out")
	urls, err := Export(context.Background(), e.deps, ExportInput{Sandbox: SandboxRef{ID: id},
		Exports: map[string]string{"out.txt": "s3://out/{dag_id}/{run_id}/{task_id}-{map_index}/{other}.txt"}})
	// The key holds the unknown placeholder literally; the URL reported
	// escapes its braces.
	key := "s3://out/dag_a/manual__2026-11-29T10:00:00+00:00/t--1/{other}.txt"
	want := "s3://out/dag_a/manual__2026-11-29T10:00:00+00:00/t--1/%7Bother%7D.txt"
	if err != nil || len(urls) != 1 || urls[0] != want || string(e.st.objects[key]) != "out" {
		t.Fatalf("urls %v, %v; want %s", urls, err, want)
	}
}

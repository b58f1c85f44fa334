package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/testing/fakemodal"
)

// modalConnID is the connection the examples' Modal tasks name (conn_id in
// the bundle configs, go_tasks' defaults).
const modalConnID = "modal_default"

// modalServer is the fake Modal control plane the examples' backend: modal
// tasks reach, in this process on 127.0.0.1. Its sandboxes run in local
// bubblewrap sandboxes under the work directory.
type modalServer struct {
	srv  *fakemodal.Server
	root string // where the fake's sandboxes live
	log  *os.File
}

// startModal runs the fake on host (127.0.0.1, or fakemodal.LocalAddr).
func startModal(w *workdir, host string) (*modalServer, error) {
	f, err := os.Create(filepath.Join(w.logs, "fakemodal.log"))
	if err != nil {
		return nil, err
	}
	srv, err := fakemodal.New(fakemodal.Options{
		Addr:   host + ":0",
		Root:   w.modal,
		Logger: hclog.New(&hclog.LoggerOptions{Name: "fakemodal", Level: hclog.Info, Output: f}),
	})
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("starting the fake Modal server: %w", err)
	}
	return &modalServer{srv: srv, root: w.modal, log: f}, nil
}

// env points the Modal SDK in the forked bundles at the fake and away from
// a developer's ~/.modal.toml. The token is deliberately not here: the
// tasks must read it from the modal_default connection, as a deployment
// does.
func (m *modalServer) env() []string {
	var env []string
	for k, v := range m.srv.Env() {
		if k != "MODAL_TOKEN_ID" && k != "MODAL_TOKEN_SECRET" {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// connection is modal_default as Airflow reads it from
// AIRFLOW_CONN_MODAL_DEFAULT: the fake's token, as the Modal provider's
// connection holds a real one (login = token id, password = secret).
func (m *modalServer) connection() string {
	b, _ := json.Marshal(map[string]string{"conn_type": "modal", "login": m.srv.TokenID(), "password": m.srv.TokenSecret()})
	return string(b)
}

// createdFor lists the sandboxes the fake created for one Dag run (by the
// owner tag our tasks stamp on them).
func (m *modalServer) createdFor(dagID, runID string) []string {
	var ids []string
	for _, c := range m.srv.Creates() {
		if c.Tags[sandbox.TagOwner] == dagID+"/"+runID {
			ids = append(ids, c.SandboxID)
		}
	}
	return ids
}

// failCommands makes every command of one Dag run's sandboxes (by their
// owner tag) whose argv contains cmd exit 1 without running, and forgets
// any earlier pick: a task's command fails as a real one would, the rest
// of the run untouched.
func (m *modalServer) failCommands(dagID, runID, cmd string) {
	owner := dagID + "/" + runID
	m.srv.FailCommands(1, func(tags map[string]string, args []string) bool {
		return tags[sandbox.TagOwner] == owner && strings.Contains(strings.Join(args, " "), cmd)
	})
}

// failedIn lists the argv of every command failCommands ended in sandbox id.
func (m *modalServer) failedIn(id string) [][]string {
	var out [][]string
	for _, x := range m.srv.FailedCommands() {
		if x.SandboxID == id {
			out = append(out, x.Args)
		}
	}
	return out
}

// sandboxFilesIn lists what the fake's local driver left in root, but its
// own files (the budget lock every worker of the root shares, which stays
// by design; their names start with a dot).
func sandboxFilesIn(root string) []string {
	entries, _ := os.ReadDir(root)
	var names []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	return names
}

// live lists the sandboxes the fake still runs.
func (m *modalServer) live() []string {
	var ids []string
	for _, s := range m.srv.Sandboxes() {
		ids = append(ids, fmt.Sprintf("%s (owner %s)", s.ID, s.Tags[sandbox.TagOwner]))
	}
	return ids
}

// stop stops the fake, destroying any sandbox still there, and fails when
// their files stay behind or when a client called an RPC the fake does not
// serve (the fake answered UNIMPLEMENTED, so the run did not test what it
// claims).
func (m *modalServer) stop() error {
	step("stopping the fake Modal server")
	m.srv.Close()
	m.log.Close()
	info("stopped; it created %d sandboxes", len(m.srv.Creates()))
	if left := sandboxFilesIn(m.root); len(left) > 0 {
		return fmt.Errorf("the fake Modal server left %s in %s after it stopped", strings.Join(left, ", "), m.root)
	}
	if u := m.srv.Unimplemented(); len(u) > 0 {
		return fmt.Errorf("the Modal clients called RPCs the fake does not serve: %s; serve them in testing/fakemodal", strings.Join(u, ", "))
	}
	return nil
}

package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"

	modal "github.com/modal-labs/modal-client/go"
)

// The command as examples/README documents it: it prints export lines,
// serves a client that uses exactly those, and on Ctrl-C stops and
// destroys its sandboxes.
func TestCommandServesWhatItPrints(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "fakemodal")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	envFile, root := filepath.Join(dir, "fakemodal.env"), filepath.Join(dir, "root")
	cmd := exec.Command(bin, "-env-file", envFile, "-root", root)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill() //nolint:errcheck // already gone when the test passed
	})

	exports := map[string]string{}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "# Ctrl-C") {
		if k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "="); ok && !strings.HasPrefix(sc.Text(), "#") {
			exports[k] = strings.Trim(v, "'")
		}
	}
	go io.Copy(io.Discard, stdout) //nolint:errcheck
	for _, k := range []string{"MODAL_SERVER_URL", "MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "MODAL_CONFIG_PATH", "AIRFLOW_CONN_MODAL_DEFAULT"} {
		if exports[k] == "" {
			t.Fatalf("no %s among the printed exports %v", k, exports)
		}
	}
	if !strings.HasPrefix(exports["MODAL_SERVER_URL"], "http://127.0.0.1:") {
		t.Fatalf("MODAL_SERVER_URL = %q", exports["MODAL_SERVER_URL"])
	}
	if file, err := os.ReadFile(envFile); err != nil || !strings.Contains(string(file), "export MODAL_SERVER_URL='"+exports["MODAL_SERVER_URL"]+"'") {
		t.Fatalf("-env-file: %q %v", file, err)
	}

	for k, v := range exports {
		t.Setenv(k, v)
	}
	c, err := modal.NewClientWithOptions(&modal.ClientParams{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	app, err := c.Apps.FromName(ctx, "airflow-sandbox", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Sandboxes.Create(ctx, app, c.Images.FromRegistry("python:3.12-slim", nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := sb.Exec(ctx, []string{"sh", "-c", "echo served"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(p.Stdout)
	if code, err := p.Wait(ctx, nil); code != 0 || err != nil || string(out) != "served\n" {
		t.Fatalf("exec through the command: %q %d %v", out, code, err)
	}
	if entries, _ := os.ReadDir(root); len(entries) == 0 {
		t.Fatalf("no sandbox under -root %s", root)
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := deadline.Wait(t, "the command to stop on Ctrl-C", exited); err != nil {
		t.Fatalf("after Ctrl-C the command ended with %v", err)
	}
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		// The local backend's own files, shared by its workers: the
		// budget's lock and the disk templates its creates copy.
		if e.Name() != ".budget.lock" && !strings.HasPrefix(e.Name(), ".disk-template-") {
			t.Fatalf("sandboxes left under -root after Ctrl-C: %v", entries)
		}
	}
}

package fakeopensandbox_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"

	"github.com/airflow-sandbox/airflow-go-worker/testing/fakeopensandbox"
	"github.com/airflow-sandbox/airflow-go-worker/testing/pyenv"
)

// The official Python SDK (opensandbox, pinned in python/requirements.lock)
// gets the same answers from the fake as from real execd:
// python/opensandbox_sdk/calls.py drives the fake in each of its versions,
// and what it prints must equal what it printed against execd built from
// OpenSandbox's source at that version (testdata/sdk-<version>.json,
// recorded by TestSDKAgainstRealExecd).
func TestSDKGetsTheRealAnswers(t *testing.T) {
	for _, v := range fakeopensandbox.Versions {
		t.Run(v, func(t *testing.T) {
			want, err := os.ReadFile(sdkRecording(v))
			if err != nil {
				t.Fatal(err)
			}
			srv := fakeopensandbox.Start(t, fakeopensandbox.Options{Version: v})
			compareSDKAnswers(t, runSDK(t, srv), want)
		})
	}
}

// Records (OPENSANDBOX_RECORD=1) or checks the transcript of a real execd:
// OPENSANDBOX_REAL_EXECD=/path/to/execd OPENSANDBOX_REAL_EXECD_VERSION=
// <one of fakeopensandbox.Versions>, run in a network namespace with only
// loopback (docs/opensandbox-execd.md).
func TestSDKAgainstRealExecd(t *testing.T) {
	bin, version := fakeopensandbox.RealExecdBinary(), os.Getenv("OPENSANDBOX_REAL_EXECD_VERSION")
	if bin == "" {
		t.Skip(fakeopensandbox.RealExecdEnv + " is not set: no real execd to record")
	}
	known := false
	for _, v := range fakeopensandbox.Versions {
		known = known || v == version
	}
	if !known {
		t.Fatalf("OPENSANDBOX_REAL_EXECD_VERSION=%q: say which build %s is, one of %v", version, bin, fakeopensandbox.Versions)
	}
	srv := fakeopensandbox.Start(t, fakeopensandbox.Options{ExecdBinary: bin})
	got := runSDK(t, srv)
	if os.Getenv("OPENSANDBOX_RECORD") == "1" {
		if err := os.WriteFile(sdkRecording(version), got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(sdkRecording(version))
	if err != nil {
		t.Fatal(err)
	}
	compareSDKAnswers(t, got, want)
}

func sdkRecording(version string) string {
	return filepath.Join("testdata", "sdk-"+version+".json")
}

// runSDK runs calls.py against srv and returns what it printed.
func runSDK(t *testing.T, srv *fakeopensandbox.Server) []byte {
	t.Helper()
	root, err := pyenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(pyenv.Python(t), filepath.Join(root, "python", "opensandbox_sdk", "calls.py"))
	cmd.Env = append(os.Environ(), "OPEN_SANDBOX_DOMAIN="+srv.Domain, "OPEN_SANDBOX_API_KEY="+srv.APIKey, "OPEN_SANDBOX_PROTOCOL=http")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-deadline.Context(t).Done(): // the script takes seconds
		cmd.Process.Kill()
		<-done
		t.Fatalf("calls.py did not finish before the test binary's deadline\n%s", errb.String())
	}
	if err != nil {
		t.Fatalf("calls.py: %v\n%s", err, errb.String())
	}
	return out.Bytes()
}

// compareSDKAnswers fails for every call whose answer differs.
func compareSDKAnswers(t *testing.T, got, want []byte) {
	t.Helper()
	type answer struct {
		Call   string `json:"call"`
		Answer any    `json:"answer"`
		Error  any    `json:"error"`
	}
	var g, w []answer
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("calls.py printed no JSON list: %v\n%s", err, got)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("the recording is no JSON list: %v", err)
	}
	if len(g) != len(w) {
		t.Fatalf("%d answers, the recording has %d", len(g), len(w))
	}
	show := func(a answer) string {
		b, _ := json.MarshalIndent(map[string]any{"answer": a.Answer, "error": a.Error}, "  ", " ")
		return string(b)
	}
	var diffs []string
	for i := range w {
		if g[i].Call != w[i].Call {
			t.Fatalf("answer %d is for %q, the recording's for %q", i, g[i].Call, w[i].Call)
		}
		if !reflect.DeepEqual(g[i], w[i]) {
			diffs = append(diffs, fmt.Sprintf("%s:\n  got  %s\n  want %s", w[i].Call, show(g[i]), show(w[i])))
		}
	}
	if len(diffs) > 0 {
		t.Errorf("%d of %d calls got other answers than from real execd:\n%s", len(diffs), len(w), strings.Join(diffs, "\n"))
	}
}

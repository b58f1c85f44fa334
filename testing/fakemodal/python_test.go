package fakemodal

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	modal "github.com/modal-labs/modal-client/go"

	"github.com/airflow-sandbox/airflow-go-worker/testing/pyenv"
)

// runPython runs python/handoff/modal_client.py (Modal's real Python client,
// modal 1.6.4 from python/requirements.lock) against s and decodes its JSON.
func runPython(t *testing.T, s *Server, out any, args ...string) {
	t.Helper()
	pyenv.RunJSON(t, s.Env(), out, "handoff/modal_client.py", args...)
}

type pyCheck struct {
	ObjectID   string            `json:"object_id"`
	Poll       *int              `json:"poll"`
	TagsBefore map[string]string `json:"tags_before"`
	TagsAfter  map[string]string `json:"tags_after"`
	Listed     []string          `json:"listed"`
	Exec       struct {
		Stdout, Stderr string
		Code           int
	} `json:"exec"`
	Stdin struct {
		Stdout      string
		PollRunning *int `json:"poll_running"`
		Code        int
	} `json:"stdin"`
	TimeoutCode int            `json:"timeout_code"`
	ReadList    []int          `json:"read_bytes"`
	ListFiles   [][]any        `json:"list_files"`
	Stat        map[string]any `json:"stat"`
	Removed     string         `json:"stat_removed"`
}

// The Go SDK provisions, the Python client does everything a handoff does
// with the sandbox, for both id shapes: V2 (the SDK's default) and V1 (a
// GPU sandbox). Each shape must reach its own RPC family, as both clients
// decide from the id alone.
func TestPythonClientReachesGoCreatedSandboxes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		gpu     string
		v1RPCs  bool
		idShape func(string) bool
	}{
		{name: "v2", idShape: func(id string) bool { return wellFormedSandboxID(id) && !isV1SandboxID(id) }},
		{name: "v1", gpu: "A10G", v1RPCs: true, idShape: isV1SandboxID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, c := newClient(t)
			sb := create(t, c, &modal.SandboxCreateParams{GPU: tc.gpu, Workdir: "/workspace", Tags: map[string]string{"airflow_owner": "d/r"}})
			if !tc.idShape(sb.SandboxID) {
				t.Fatalf("sandbox id %q has the wrong shape for %s", sb.SandboxID, tc.name)
			}
			var got pyCheck
			runPython(t, s, &got, "check", sb.SandboxID)

			if got.ObjectID != sb.SandboxID || got.Poll != nil {
				t.Errorf("from_id/poll: id %q poll %v; want %q, still running", got.ObjectID, got.Poll, sb.SandboxID)
			}
			if got.TagsBefore["airflow_owner"] != "d/r" || got.TagsAfter["checked_by"] != "modal_client.py" || got.TagsAfter["airflow_owner"] != "d/r" {
				t.Errorf("tags before %v after %v", got.TagsBefore, got.TagsAfter)
			}
			if !slices.Equal(got.Listed, []string{sb.SandboxID}) {
				t.Errorf("Sandbox.list(tags) = %v", got.Listed)
			}
			if got.Exec.Stdout != "out\n/workspace\n" || got.Exec.Stderr != "err\n" || got.Exec.Code != 3 {
				t.Errorf("exec: %+v", got.Exec)
			}
			if got.Stdin.Stdout != "through stdin" || got.Stdin.PollRunning != nil || got.Stdin.Code != 0 {
				t.Errorf("stdin exec: %+v", got.Stdin)
			}
			// Killed by the fake at its deadline (137), or reported by the
			// client's own deadline (-1): the provider accepts both.
			if got.TimeoutCode != 137 && got.TimeoutCode != -1 {
				t.Errorf("exec past its deadline returned %d", got.TimeoutCode)
			}
			if want := []int{0, 1, 'b', 'i', 'n', 'a', 'r', 'y', 0xff}; !slices.Equal(got.ReadList, want) {
				t.Errorf("read_bytes = %v, want %v", got.ReadList, want)
			}
			list, _ := json.Marshal(got.ListFiles)
			if !strings.HasPrefix(string(list), `[["data.bin",false,9],["sub",true,`) {
				t.Errorf("list_files = %s", list)
			}
			if got.Stat["name"] != "data.bin" || got.Stat["type"] != "file" || got.Stat["size"] != float64(9) {
				t.Errorf("stat = %v", got.Stat)
			}
			if got.Removed != "SandboxFilesystemNotFoundError" {
				t.Errorf("stat after remove: %q", got.Removed)
			}

			v1 := []string{"SandboxWait", "SandboxTagsGet", "SandboxTagsSet", "SandboxGetTaskId", "TaskGetCommandRouterAccess"}
			v2 := []string{"SandboxWaitV2", "SandboxTagsGetV2", "SandboxTagsSetV2", "SandboxGetTaskIdV2", "SandboxGetCommandRouterAccess"}
			want, not := v2, v1
			if tc.v1RPCs {
				want, not = v1, v2
			}
			for _, m := range want {
				if s.Calls(m) == 0 {
					t.Errorf("the Python client never called %s for a %s id", m, tc.name)
				}
			}
			for _, m := range not {
				if s.Calls(m) != 0 {
					t.Errorf("the Python client called %s for a %s id", m, tc.name)
				}
			}
			for _, m := range []string{"TaskExecStart", "TaskExecStdioRead", "TaskExecWait", "TaskExecPoll", "TaskExecStdinWrite", "TaskExecStdinWriteStream"} {
				if s.Calls(m) == 0 {
					t.Errorf("router RPC %s was never called", m)
				}
			}

			// Terminated from Go, seen from Python: from_id still works and
			// poll reports 137, as Modal does for a terminated sandbox.
			if _, err := sb.Terminate(context.Background(), &modal.SandboxTerminateParams{Wait: true}); err != nil {
				t.Fatal(err)
			}
			var after struct{ Poll *int }
			runPython(t, s, &after, "poll", sb.SandboxID)
			if after.Poll == nil || *after.Poll != 137 {
				t.Errorf("poll after terminate = %v, want 137", after.Poll)
			}
		})
	}
}

// A sandbox the Python client creates is one the Go SDK can drive.
func TestGoSDKReachesPythonCreatedSandbox(t *testing.T) {
	s, c := newClient(t)
	var made struct {
		ObjectID string `json:"object_id"`
		AppID    string `json:"app_id"`
	}
	runPython(t, s, &made, "create", "airflow-sandbox", "airflow-sandbox-0123456789ab")
	if !wellFormedSandboxID(made.ObjectID) || isV1SandboxID(made.ObjectID) || !strings.HasPrefix(made.AppID, "ap-") {
		t.Fatalf("Python created %+v; want a V2 sandbox id and an app id", made)
	}
	rec := s.Creates()[0]
	if rec.Definition.GetName() != "airflow-sandbox-0123456789ab" || rec.Definition.GetWorkdir() != "/workspace" || rec.Tags["made_by"] != "modal_client.py" {
		t.Fatalf("create carried name %q workdir %q tags %v", rec.Definition.GetName(), rec.Definition.GetWorkdir(), rec.Tags)
	}
	sb, err := c.Sandboxes.FromID(context.Background(), made.ObjectID, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, _, code, err := run(t, sb, nil, "sh", "-c", "pwd")
	if err != nil || code != 0 || out != "/workspace\n" {
		t.Fatalf("Go exec in a Python-made sandbox: %q %d %v", out, code, err)
	}
}

// An RPC the fake does not serve is answered UNIMPLEMENTED, naming the
// method, at once; the fake records it (Start fails a test on it unless
// told otherwise).
func TestPythonClientUnservedRPCIsNamed(t *testing.T) {
	s := Start(t, Options{AllowUnimplemented: true})
	s.SetEnv(t)
	c, err := modal.NewClientWithOptions(&modal.ClientParams{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	sb := create(t, c, nil)
	var got struct{ Error, Message string }
	runPython(t, s, &got, "unserved", sb.SandboxID)
	if got.Error != "UnimplementedError" || !strings.Contains(got.Message, "/modal.client.ModalClient/SandboxGetTunnelsV2") {
		t.Fatalf("unserved RPC: %+v", got)
	}
	// It fails at the first answer: a client that retried it would call again.
	if n := s.Calls("SandboxGetTunnelsV2"); n != 1 {
		t.Errorf("the unserved RPC was called %d times, want once", n)
	}
	if m := s.Unimplemented(); !slices.Equal(m, []string{"/modal.client.ModalClient/SandboxGetTunnelsV2"}) {
		t.Fatalf("Unimplemented() = %v", m)
	}
}

// Ids that are not Modal's are refused as such, not looked up.
func TestMalformedSandboxIDIsInvalidArgument(t *testing.T) {
	s, _ := newClient(t)
	for _, id := range []string{"airflow-sandbox-0123456789ab", "3f0c3a3e-5a36-4b8e-9d5c-2f1a6f1f0b8d", "sb-", "sb-not a real id"} {
		var got struct{ Error, Message string }
		runPython(t, s, &got, "poll", id)
		if got.Error != "InvalidError" || !strings.Contains(got.Message, "is not a Modal sandbox id") {
			t.Errorf("from_id(%q): %+v", id, got)
		}
	}
	var got struct{ Error, Message string }
	runPython(t, s, &got, "poll", "sb-01ARZ3NDEKTSV4RRFFQ69G5FAV")
	if got.Error != "NotFoundError" {
		t.Errorf("from_id of a well-formed unknown id: %+v", got)
	}
}

package tasks

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/testing/syncbuf"
	"github.com/airflow-sandbox/airflow-go-worker/testing/waitwriter"
)

func TestDurationForms(t *testing.T) {
	for in, want := range map[string]time.Duration{
		`"1h30m"`: 90 * time.Minute, `5400`: 90 * time.Minute, `"5400"`: 90 * time.Minute,
		`0.5`: 500 * time.Millisecond, `null`: 0, `""`: 0,
	} {
		var d Duration
		if err := json.Unmarshal([]byte(in), &d); err != nil || time.Duration(d) != want {
			t.Errorf("%s: got %v, %v; want %v", in, time.Duration(d), err, want)
		}
	}
	for _, bad := range []string{`"soon"`, `-5`, `"-1h"`, `true`, `[1]`} {
		var d Duration
		if err := json.Unmarshal([]byte(bad), &d); err == nil {
			t.Errorf("%s: want an error, got %v", bad, time.Duration(d))
		}
	}
}

func TestSandboxRefForms(t *testing.T) {
	var r SandboxRef
	if err := json.Unmarshal([]byte(`" sb-123 "`), &r); err != nil || r != (SandboxRef{ID: "sb-123"}) {
		t.Fatalf("bare id: %+v, %v", r, err)
	}
	if err := json.Unmarshal([]byte(`{"backend": "modal", "id": "sb-9", "conn_id": "m", "owner": "d/r"}`), &r); err != nil ||
		r != (SandboxRef{ID: "sb-9", Backend: "modal", ConnID: "m"}) {
		t.Fatalf("record: %+v, %v", r, err)
	}
	if err := json.Unmarshal([]byte(`42`), &r); err == nil {
		t.Fatal("a number is not a sandbox")
	}
	if b, _ := json.Marshal(SandboxRef{ID: "sb-1", Backend: "modal"}); string(b) != `"sb-1"` {
		t.Fatalf("a ref marshals as the bare id, got %s", b)
	}
}

func TestCommandsForms(t *testing.T) {
	var c Commands
	if err := json.Unmarshal([]byte(`"make"`), &c); err != nil || len(c) != 1 || c[0] != "make" {
		t.Fatalf("%v %v", c, err)
	}
	if err := json.Unmarshal([]byte(`["a", "b"]`), &c); err != nil || len(c) != 2 {
		t.Fatalf("%v %v", c, err)
	}
	if err := json.Unmarshal([]byte(`{"a": 1}`), &c); err == nil || !strings.Contains(err.Error(), "command") {
		t.Fatalf("want an error naming command, got %v", err)
	}
}

func TestLineLogger(t *testing.T) {
	var buf syncbuf.Buffer
	l := newLineLogger(hclog.New(&hclog.LoggerOptions{Output: &buf}), "stdout", nil)
	for _, chunk := range []string{"par", "tial\r\nsec", "ond\n", "no newline"} {
		l.Write([]byte(chunk))
	}
	if strings.Contains(buf.String(), "no newline") {
		t.Fatal("an unterminated line was logged before Flush")
	}
	l.Flush()
	out := buf.String()
	for _, want := range []string{"partial: stream=stdout", "second: stream=stdout", "no newline: stream=stdout"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	buf.Reset()
	l.Write([]byte(strings.Repeat("x", maxLogLine*2+5) + "\n"))
	if n := strings.Count(buf.String(), "stream=stdout"); n != 3 {
		t.Fatalf("a %d-byte line should be logged in 3 bounded pieces, got %d", maxLogLine*2+5, n)
	}
}

// A line too long to log whole is cut into pieces; a secret straddling a
// cut must still be redacted, not logged as two harmless-looking halves.
func TestLineLoggerRedactsASecretAcrossACut(t *testing.T) {
	const secret = "sk-live-0123456789abcdef"
	for _, at := range []int{maxLogLine - 10, maxLogLine - 1, maxLogLine - len(secret)} {
		var buf syncbuf.Buffer
		l := newLineLogger(hclog.New(&hclog.LoggerOptions{Output: &buf}), "stdout", newRedactor([]string{secret}))
		line := strings.Repeat("x", at) + secret + strings.Repeat("y", maxLogLine) + "\n"
		for len(line) > 0 { // in uneven writes, as a pipe delivers them
			n := min(len(line), 4093)
			l.Write([]byte(line[:n]))
			line = line[n:]
		}
		out := buf.String()
		if strings.Count(out, "***") != 1 || strings.Contains(out, secret[:8]) || strings.Contains(out, secret[len(secret)-8:]) {
			t.Errorf("secret at offset %d: the log shows a piece of it, or not exactly one ***", at)
		}
		if got := strings.Count(out, "x") + strings.Count(out, "y"); got != at+maxLogLine {
			t.Errorf("secret at offset %d: %d bytes of output logged, want %d", at, got, at+maxLogLine)
		}
	}
}

func TestTransfersIntoASandboxLogProgress(t *testing.T) {
	e := newEnv(t)
	// The object is held after its first byte until a progress line is
	// logged: a transfer under way reports, even while it is stalled.
	sink := waitwriter.New("transfer progress")
	e.deps.Logger = hclog.New(&hclog.LoggerOptions{Output: sink})
	defer func(every time.Duration) { ProgressEvery = every }(ProgressEvery)
	ProgressEvery = time.Millisecond
	e.st.objects["s3://in/big.bin"] = bytes.Repeat([]byte("x"), 4<<20)
	e.st.midRead = sink.Seen()
	if _, err := Provision(context.Background(), e.deps, ProvisionInput{StageIn: map[string]string{"big.bin": "s3://in/big.bin"}}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"transfer progress", `what="s3://in/big.bin -> big.bin"`, "mib_per_s=", "transfer finished", "bytes=4194304"} {
		if !strings.Contains(sink.String(), s) {
			t.Errorf("the log lacks %q:\n%s", s, sink.String())
		}
	}
}

// ConvertInput embeds ProvisionInput: every provision key reaches the
// sandbox a conversion creates.
func TestConvertInputCarriesEveryProvisionField(t *testing.T) {
	full := `{"backend":"modal","conn_id":"m","backend_options":{"modal":{"app_name":"a","regions":["us-east"]}},"gpu":"T4",
		"image":"python:3.12","cpu":2,"memory_mib":512,
		"lifetime":"2h","workdir":"/w","env":{"A":"1"},"env_from":{"B":{"variable":"b"}},
		"network":{"block":true,"allow_hosts":["h"]},"owner":"d/r","tags":{"t":"v"},
		"stage_in":{"a":"s3://b/a"},"storage_conn_id":"s3"}`
	var p ProvisionInput
	var c ConvertInput
	if err := json.Unmarshal([]byte(full), &p); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(full), &c); err != nil {
		t.Fatal(err)
	}
	pj, _ := json.Marshal(p)
	cj, _ := json.Marshal(c.ProvisionInput)
	if string(pj) != string(cj) {
		t.Fatalf("ConvertInput lost provision fields:\nprovision %s\nconvert   %s", pj, cj)
	}
	var keys, back map[string]any
	json.Unmarshal([]byte(full), &keys)
	json.Unmarshal(pj, &back)
	if len(back) != len(keys) {
		t.Errorf("ProvisionInput encodes %d keys, the test input has %d: a field is untested or unknown", len(back), len(keys))
	}
	for k := range keys {
		if _, ok := back[k]; !ok {
			t.Errorf("test input key %q is not a ProvisionInput field", k)
		}
	}
}

package opensandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/opensandbox"
	"github.com/airflow-sandbox/airflow-go-worker/testing/fakeopensandbox"
	"github.com/airflow-sandbox/airflow-go-worker/testing/syncbuf"
	"github.com/airflow-sandbox/airflow-go-worker/testing/waitwriter"
)

// Behaviour that differs between real execd builds (docs/opensandbox-execd.md):
// the driver must give the same results on every version the fake
// imitates, and on a real execd when OPENSANDBOX_REAL_EXECD names one.

// realExecd is the version name forVersions gives a real execd; for it,
// fakeOptions runs that binary instead of the fake's execd.
const realExecd = "real"

func forVersions(t *testing.T, fn func(t *testing.T, version string)) {
	versions := fakeopensandbox.Versions
	if fakeopensandbox.RealExecdBinary() != "" {
		versions = append(versions[:len(versions):len(versions)], realExecd)
	}
	for _, v := range versions {
		t.Run("execd "+v, func(t *testing.T) { fn(t, v) })
	}
}

// fakeOptions are the fake's options for version, as forVersions names it.
func fakeOptions(version string) fakeopensandbox.Options {
	if version == realExecd {
		return fakeopensandbox.Options{ExecdBinary: fakeopensandbox.RealExecdBinary()}
	}
	return fakeopensandbox.Options{Version: version}
}

// sh runs a command that must succeed and returns its stdout.
func sh(t *testing.T, sb *sandbox.Sandbox, command string) string {
	t.Helper()
	var out, errb bytes.Buffer
	res, err := sb.Exec(ctxT(t), command, sandbox.ExecOptions{Stdout: &out, Stderr: &errb})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%q: %+v %v, stderr %q", command, res, err, errb.String())
	}
	return out.String()
}

// The Driver contract: an existing file or symlink at the path is
// replaced. execd's DELETE /files leaves a dangling link in place and
// refuses a link to a directory, and its upload follows links.
func TestWriteFileReplacesSymlinks(t *testing.T) {
	forVersions(t, func(t *testing.T, version string) {
		e := newEnv(t, fakeOptions(version), nil)
		ctx := ctxT(t)
		sb := create(t, e, sandbox.Spec{})
		sh(t, sb, "mkdir d && echo keep > d/inside && ln -s d dlink && ln -s victim.txt dangling && mkdir out && ln -s out/deep/file.txt dangling-deep")
		for _, p := range []string{"dangling", "dlink", "dangling-deep"} {
			if err := sb.WriteFile(ctx, p, strings.NewReader("new "+p), 0o644); err != nil {
				t.Errorf("write onto the symlink %s: %v", p, err)
			}
		}
		got := sh(t, sb, `for p in dangling dlink dangling-deep; do if [ -L $p ]; then echo "$p: still a link"; else echo "$p: $(cat $p)"; fi; done
test -e victim.txt && echo "victim.txt written through the link"
test -e out/deep && echo "out/deep created through the link"
cat d/inside`)
		want := "dangling: new dangling\ndlink: new dlink\ndangling-deep: new dangling-deep\nkeep\n"
		if got != want {
			t.Errorf("after writing onto symlinks:\n%s\nwant:\n%s", got, want)
		}
	})
}

// Create makes the workdir only when it is missing: execd re-applies the
// mode of an existing directory (a /tmp of 1777 became 0755).
func TestCreateLeavesAnExistingWorkdirAlone(t *testing.T) {
	forVersions(t, func(t *testing.T, version string) {
		e := newEnv(t, fakeOptions(version), nil)
		ref := create(t, e, sandbox.Spec{})
		before := sh(t, ref, "stat -c %a /tmp")
		sb := create(t, e, sandbox.Spec{Workdir: "/tmp"})
		if got := sh(t, sb, "stat -c %a /tmp; pwd"); got != before+"/tmp\n" {
			t.Errorf("a sandbox with workdir /tmp: %q, want /tmp's mode %q unchanged and commands in /tmp", got, before)
		}
		sb = create(t, e, sandbox.Spec{Workdir: "/tmp/new/job"})
		if got := sh(t, sb, "stat -c %a /tmp/new/job; pwd"); got != "755\n/tmp/new/job\n" {
			t.Errorf("a new workdir: %q", got)
		}
	})
}

// 500 RUNTIME_ERROR is execd's answer for failures that no retry fixes.
func TestDeterministicExecdFailuresAreTerminal(t *testing.T) {
	// VersionMain: files/info serves Stat there, so its faults reach it.
	e := newEnv(t, fakeopensandbox.Options{Version: fakeopensandbox.VersionMain}, nil)
	ctx := ctxT(t)
	sb := create(t, e, sandbox.Spec{})
	sh(t, sb, "echo x > afile")
	err := sb.WriteFile(ctx, "afile/child.txt", strings.NewReader("x"), 0o644)
	if err == nil || sandbox.IsRetryable(err) || strings.Contains(err.Error(), "retry later") {
		t.Errorf("write below a file: want a terminal error without retry advice, got %v", err)
	}
	for _, tc := range []struct {
		msg       string
		retryable bool
	}{
		{"path is a directory: /workspace/x", false},
		{"no such session: abc", false},
		{"mkdir /workspace/x: not a directory", false},
		{"invalid mode 999: not octal digits", false},
		{"open /workspace/x: too many open files", true},
		{"read /workspace/x: resource temporarily unavailable", true},
	} {
		e.srv.Inject(fakeopensandbox.RouteInfo, 1, fakeopensandbox.Fault{Status: 500, Code: "RUNTIME_ERROR", Message: tc.msg})
		_, err := sb.Stat(ctx, "afile")
		if err == nil || sandbox.IsRetryable(err) != tc.retryable || sandbox.IsFinal(err) == tc.retryable || errors.Is(err, sandbox.ErrRejected) == tc.retryable {
			t.Errorf("500 RUNTIME_ERROR %q: retryable %v, final %v, want retryable %v (%v)", tc.msg, sandbox.IsRetryable(err), sandbox.IsFinal(err), tc.retryable, err)
		}
	}
	// Other 5xx still may pass.
	e.srv.FailNext(fakeopensandbox.RouteInfo, 1)
	if _, err := sb.Stat(ctx, "afile"); !sandbox.IsRetryable(err) || sandbox.IsFinal(err) {
		t.Errorf("a 500 that is not execd's RUNTIME_ERROR must stay retryable: %v", err)
	}
}

// When execd got its token by environment, commands inherit it: the
// driver must not hand it to them.
func TestCommandsCannotReadTheExecdToken(t *testing.T) {
	forVersions(t, func(t *testing.T, version string) {
		const token = "execd-secret-7f3a"
		fo := fakeOptions(version)
		fo.ExecdToken, fo.ExecdTokenInEnv = token, true
		e := newEnv(t, fo, nil)
		sb := create(t, e, sandbox.Spec{})
		for _, cmd := range []string{"env", "cat /proc/self/environ | tr '\\0' '\\n'", "sh -c env", "echo \"$EXECD_ACCESS_TOKEN\""} {
			if got := sh(t, sb, cmd); strings.Contains(got, token) {
				t.Errorf("%s shows the execd token:\n%s", cmd, got)
			}
		}
		// Stdin goes through a file and a wrapper too; it must still work.
		var out bytes.Buffer
		if _, err := sb.Exec(ctxT(t), "env; cat", sandbox.ExecOptions{Stdin: strings.NewReader("in"), Stdout: &out}); err != nil || strings.Contains(out.String(), token) || !strings.HasSuffix(out.String(), "in") {
			t.Errorf("with stdin: %q %v", out.String(), err)
		}
		// A variable the caller maps explicitly is the caller's to give.
		var mine bytes.Buffer
		if _, err := sb.Exec(ctxT(t), `echo "$EXECD_ACCESS_TOKEN"`, sandbox.ExecOptions{Env: map[string]string{"EXECD_ACCESS_TOKEN": "mapped"}, Stdout: &mine}); err != nil || mine.String() != "mapped\n" {
			t.Errorf("an explicitly mapped EXECD_ACCESS_TOKEN: %q %v", mine.String(), err)
		}
	})
}

// An interrupt blocks while execd waits for the process group (SIGTERM,
// up to ~3 s, SIGKILL): a short request timeout must not cut it off and
// leave the command running behind the caller.
func TestCancelWaitsForTheInterrupt(t *testing.T) {
	forVersions(t, func(t *testing.T, version string) {
		logs := &syncbuf.Buffer{}
		log := hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Warn})
		e := newEnv(t, fakeOptions(version), func(o *opensandbox.Options) {
			o.Config.RequestTimeout = time.Second
			o.Logger = log
		})
		sb := create(t, e, sandbox.Spec{})
		ctx, cancel := context.WithCancel(ctxT(t))
		out := waitwriter.New("started")
		go func() {
			<-out.Seen()
			cancel()
		}()
		_, err := sb.Exec(ctx, "trap 'sleep 2; exit 7' TERM; echo started; sleep 60 & wait", sandbox.ExecOptions{Stdout: out, Timeout: 2 * time.Minute})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
		if n := e.srv.RunningCommands(); n != 0 {
			t.Errorf("%d command(s) still running when Exec returned", n)
		}
		if strings.Contains(logs.String(), "could not interrupt") {
			t.Errorf("the interrupt failed:\n%s", logs.String())
		}
	})
}

// A download of a path that turned into a directory answers 200 with a
// Content-Length of 2^63-1 and no body (execd closes the connection; a
// proxy in between may hold it open); a malformed Range is answered the
// same way with a 416. Neither may hang the client.
func TestBodylessExecdAnswersDoNotHang(t *testing.T) {
	forVersions(t, func(t *testing.T, version string) {
		e := newEnv(t, fakeOptions(version), nil)
		ctx := ctxT(t)
		sb := create(t, e, sandbox.Spec{})
		sh(t, sb, "mkdir adir")
		ex, err := e.drv.Execd(ctx, sb.ID())
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			rc, err := ex.DownloadFile(ctx, "/workspace/adir", "")
			if err == nil {
				_, err = io.Copy(io.Discard, rc)
				rc.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, sandbox.ErrIsDir) {
				t.Errorf("download of a directory: want ErrIsDir, got %v", err)
			}
		case <-deadline.Context(t).Done():
			t.Fatal("the download of a directory hung")
		}
	})
}

// After the terminal event execd keeps the stream open about a second and
// may send a ping: a command's result must not wait for the stream to
// close.
func TestResultDoesNotWaitForTheLingeringStream(t *testing.T) {
	e := newEnv(t, fakeopensandbox.Options{Linger: time.Hour}, nil)
	sb := create(t, e, sandbox.Spec{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		sh(t, sb, "true")
	}()
	deadline.Wait(t, "Exec to return after the terminal event, not when the (hour-long) stream closes", done)
}

// A route execd does not have answers Gin's 404 text: that is no missing
// file, and no retry fixes it.
func TestUnknownExecdRouteIsNotAMissingFile(t *testing.T) {
	// VersionMain: files/info serves Stat there, so its faults reach it.
	e := newEnv(t, fakeopensandbox.Options{Version: fakeopensandbox.VersionMain}, nil)
	sb := create(t, e, sandbox.Spec{})
	e.srv.Inject(fakeopensandbox.RouteInfo, 1, fakeopensandbox.Fault{Status: 404, Text: "404 page not found"})
	_, err := sb.Stat(ctxT(t), "/workspace")
	if err == nil || errors.Is(err, sandbox.ErrNotFound) || sandbox.IsRetryable(err) || !strings.Contains(err.Error(), "does not have the call (the driver is verified with execd v1.0.18") {
		t.Fatalf("err = %v", err)
	}
}

// Stat describes a path without following a final symlink, and List lists
// a directory (through a symlink to it), with the same answers on every
// build: released v1.0.18 has neither a type in files/info nor
// /directories/list, so the driver asks the sandbox there.
func TestStatAndListOnEveryVersion(t *testing.T) {
	forVersions(t, func(t *testing.T, version string) {
		e := newEnv(t, fakeOptions(version), nil)
		ctx := ctxT(t)
		sb := create(t, e, sandbox.Spec{})
		sh(t, sb, `mkdir -p d/sub && printf 12345 > d/f.txt && ln -s f.txt d/link && ln -s nowhere d/dangling && ln -s d dlink &&
printf x > "d/$(printf 'new\nline')" && printf yy > d/é.txt && : > d/.hidden && mkfifo d/fifo`)
		kinds := map[string]string{}
		for _, name := range []string{"d", "d/f.txt", "d/link", "d/dangling", "dlink", "d/fifo"} {
			fi, err := sb.Stat(ctx, name)
			if err != nil {
				t.Fatalf("stat %s: %v", name, err)
			}
			kinds[name] = fmt.Sprintf("%s %v", fi.Name, fi.Mode.Type())
			if name == "d/f.txt" && (fi.Size != 5 || fi.Mode.Perm() != 0o644 || fi.ModTime.IsZero()) {
				t.Errorf("stat d/f.txt: %+v", fi)
			}
		}
		// execd's types are file, directory, symlink and other: a fifo is
		// irregular.
		want := map[string]string{"d": "d d---------", "d/f.txt": "f.txt ----------", "d/link": "link L---------",
			"d/dangling": "dangling L---------", "dlink": "dlink L---------", "d/fifo": "fifo ?---------"}
		for k, w := range want {
			if kinds[k] != w {
				t.Errorf("stat %s = %q, want %q", k, kinds[k], w)
			}
		}
		if _, err := sb.Stat(ctx, "d/missing"); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("stat of a missing path: %v", err)
		}
		for _, dir := range []string{"d", "dlink"} {
			list, err := sb.List(ctx, dir)
			if err != nil {
				t.Fatalf("list %s: %v", dir, err)
			}
			var got []string
			for _, fi := range list {
				got = append(got, fmt.Sprintf("%s %v %d", fi.Name, fi.Mode.Type(), map[bool]int64{true: fi.Size, false: -1}[fi.Mode.IsRegular()]))
			}
			want := []string{".hidden ---------- 0", "dangling L--------- -1", "f.txt ---------- 5", "fifo ?--------- -1",
				"link L--------- -1", "new\nline ---------- 1", "sub d--------- -1", "é.txt ---------- 2"}
			if strings.Join(got, "|") != strings.Join(want, "|") {
				t.Errorf("list %s:\n%q\nwant\n%q", dir, got, want)
			}
		}
		if _, err := sb.List(ctx, "d/f.txt"); err == nil || errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("list of a file: want an error that is not ErrNotFound, got %v", err)
		}
		if _, err := sb.List(ctx, "d/missing"); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("list of a missing path: %v", err)
		}
		if l, err := sb.List(ctx, "d/sub"); err != nil || len(l) != 0 {
			t.Errorf("list of an empty directory: %v %v", l, err)
		}
	})
}

// The documented limits of command output through execd: it travels as
// JSON strings, so a byte that is not UTF-8 arrives as U+FFFD, and lines
// split at "\r" and "\r\n" as at "\n", so both arrive as "\n". Files keep
// every byte.
func TestOutputIsTextFilesAreBytes(t *testing.T) {
	forVersions(t, func(t *testing.T, version string) {
		e := newEnv(t, fakeOptions(version), nil)
		sb := create(t, e, sandbox.Spec{})
		if got := sh(t, sb, `printf 'x\377y\r\nz\rw'`); got != "x\uFFFDy\nz\nw" {
			t.Errorf("output %q, want %q", got, "x\uFFFDy\nz\nw")
		}
		sh(t, sb, `printf 'x\377y\r\n' > raw`)
		rc, _, err := sb.OpenFile(ctxT(t), "raw", 100)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		if b, _ := io.ReadAll(rc); string(b) != "x\xffy\r\n" {
			t.Errorf("file %q", b)
		}
	})
}

//go:build arm64vm && linux

// Package arm64vm boots an emulated arm64 Linux (QEMU, Debian's kernel) and
// runs the arm64 build there: the exit holder is assembly of its own on
// each architecture (internal/exitorder), and this machine is
// amd64. `make test-arm64` runs it (scripts/ensure-arm64-vm.sh gets QEMU
// and the kernel); `make test` does not, as the build tag keeps it out.
//
// This test binary, built for arm64, is the VM's init: as pid 1 it mounts
// what the tasks need, runs the exitorder tests and pings of the real
// binary through our supervisor, prints one line per result on the serial
// console and powers the VM off. The host side reads those lines.
package arm64vm

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"

	"github.com/cavaliergopher/cpio"
	"golang.org/x/sys/unix"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/selftest"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/supervisor"
	"github.com/airflow-sandbox/airflow-go-worker/internal/exitorder"
	"github.com/airflow-sandbox/airflow-go-worker/testing/makebuild"
)

// kernelEnv names the arm64 kernel to boot (the Makefile sets it from
// scripts/ensure-arm64-vm.sh).
const kernelEnv = "AIRFLOW_GO_WORKER_ARM64_KERNEL"

// pings is how many self-test pings the VM runs with the holder, and
// with it turned off.
const pings = 20

func TestMain(m *testing.M) {
	if os.Getpid() == 1 {
		runInit()
		os.Exit(1) // not reached: runInit powers the VM off
	}
	os.Exit(m.Run())
}

// TestExitHolderOnArm64 boots the VM and checks what its init reports:
// that it ran on arm64, that the exit holder tests passed there, and that
// every ping of the default build left a holder that outlived the task and
// exited cleanly, where with the holder turned off none did.
func TestExitHolderOnArm64(t *testing.T) {
	kernel := os.Getenv(kernelEnv)
	if kernel == "" {
		t.Fatalf("%s is not set: run `make test-arm64`, which gets QEMU and an arm64 kernel (scripts/ensure-arm64-vm.sh)", kernelEnv)
	}
	root := t.TempDir()
	arm64 := []string{"GOARCH=arm64"}
	makebuild.Build{Pkg: "../../cmd/airflow-go-worker", Env: arm64}.Must(t, filepath.Join(root, "airflow-go-worker"))
	goTestC(t, "../../internal/exitorder", filepath.Join(root, "exitorder.test"))
	goTestC(t, ".", filepath.Join(root, "init"), "-tags", "arm64vm")
	initrd := filepath.Join(t.TempDir(), "initrd.gz")
	writeInitramfs(t, root, initrd)

	// The emulated machine may be slow on a loaded host: it runs until it
	// powers off, or is killed near the test binary's deadline.
	qemu := exec.CommandContext(deadline.Context(t), "qemu-system-aarch64", "-M", "virt", "-cpu", "cortex-a57", "-smp", "2", "-m", "1024",
		"-nographic", "-no-reboot", "-kernel", kernel, "-initrd", initrd,
		"-append", "console=ttyAMA0 rdinit=/init quiet panic=-1")
	out, err := qemu.CombinedOutput()
	t.Logf("the VM's console:\n%s", out)
	if err != nil {
		t.Fatalf("qemu-system-aarch64: %v (console above)", err)
	}
	report := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ": "); ok && strings.HasPrefix(k, "REPORT ") {
			report[strings.TrimPrefix(k, "REPORT ")] = v
		}
	}
	for key, want := range map[string]string{
		"machine":           "aarch64",
		"exitorder tests":   "ok",
		"holder on":         fmt.Sprintf("%d of %d pings succeeded, %d holders exited 0", pings, pings, pings),
		"holder off":        fmt.Sprintf("%d of %d pings succeeded, 0 holders exited 0", pings, pings),
		"holders left over": "0",
	} {
		if got := report[key]; got != want {
			t.Errorf("the VM reported %s: %q, want %q", key, got, want)
		}
	}
}

// goTestC compiles pkg's tests for arm64 into out.
func goTestC(t *testing.T, pkg, out string, flags ...string) {
	t.Helper()
	args := append([]string{"test", "-c", "-trimpath", "-o", out}, flags...)
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Env = append(os.Environ(), "GOARCH=arm64", "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go test -c %s for arm64: %v\n%s", pkg, err, msg)
	}
}

// writeInitramfs packs the files of dir, executable, at the root of a
// gzipped newc cpio archive. /dev/console comes from the kernel's own
// built-in initramfs.
func writeInitramfs(t *testing.T, dir, out string) {
	t.Helper()
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz := gzip.NewWriter(f)
	w := cpio.NewWriter(gz)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		body, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WriteHeader(&cpio.Header{Name: e.Name(), Mode: 0o755, Size: int64(len(body)), Links: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
}

// runInit is the VM's init. It never returns: it powers the VM off.
func runInit() {
	report := func(key, format string, args ...any) {
		fmt.Printf("REPORT %s: %s\n", key, fmt.Sprintf(format, args...))
	}
	defer func() {
		unix.Sync()
		unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	}()
	for _, m := range []struct{ dir, fs string }{{"/proc", "proc"}, {"/dev", "devtmpfs"}, {"/tmp", "tmpfs"}} {
		os.MkdirAll(m.dir, 0o755)
		if err := unix.Mount(m.fs, m.dir, m.fs, 0, ""); err != nil {
			report("setup", "mounting %s: %v", m.dir, err)
			return
		}
	}
	if err := loopbackUp(); err != nil {
		report("setup", "lo up: %v", err) // the supervisor listens on 127.0.0.1
		return
	}
	var u unix.Utsname
	unix.Uname(&u)
	report("machine", "%s", unix.ByteSliceToString(u.Machine[:]))
	env := []string{"PATH=/", "TMPDIR=/tmp", "HOME=/tmp"}

	tests := exec.Command("/exitorder.test", "-test.v", "-test.count=2")
	tests.Stdout, tests.Stderr, tests.Env = os.Stdout, os.Stderr, env
	if err := tests.Run(); err != nil {
		report("exitorder tests", "%v", err)
	} else {
		report("exitorder tests", "ok")
	}

	// pid 1 adopts every orphan: an exit holder outlives its task process,
	// so after each ping, when the task process has been reaped, what is
	// left to reap is its holder.
	for _, c := range []struct {
		key string
		env []string
	}{
		{"holder on", nil},
		{"holder off", []string{exitorder.HolderEnv + "=off"}},
	} {
		ok, held := 0, 0
		for range pings {
			// No limit of its own: the host kills the machine near its
			// test's deadline.
			s := &supervisor.Supervisor{Executable: "/airflow-go-worker", Env: append(env, c.env...), Logs: io.Discard}
			res, err := s.RunTask(context.Background(), supervisor.TaskRequest{DagID: selftest.DagID, TaskID: "ping"})
			if err == nil && res.State == supervisor.StateSuccess {
				ok++
			} else {
				fmt.Printf("ping: %s %v %q\n", res.State, err, res.Output)
			}
			var ws unix.WaitStatus
			if _, err := unix.Wait4(-1, &ws, 0, nil); err == nil && ws.Exited() && ws.ExitStatus() == 0 {
				held++
			}
		}
		report(c.key, "%d of %d pings succeeded, %d holders exited 0", ok, pings, held)
	}
	left := 0
	for {
		var ws unix.WaitStatus
		if pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil); err != nil || pid <= 0 {
			break
		}
		left++
	}
	report("holders left over", "%d", left)
}

// loopbackUp sets lo up, as a booted system's network setup would.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	ifr.SetUint16(unix.IFF_UP | unix.IFF_LOOPBACK | unix.IFF_RUNNING)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

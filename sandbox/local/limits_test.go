package local

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// os.Chmod(p, 0o1777) drops the sticky bit in Go (it wants os.ModeSticky):
// the sandbox's /tmp must keep it, inside and on the host.
func TestTmpKeepsStickyBit(t *testing.T) {
	d := newTestDriver(t)
	sb := create(t, d, sandbox.Spec{})
	_, out, _ := run(t, sb, "stat -c %a /tmp", 10*time.Second)
	if strings.TrimSpace(out) != "1777" {
		t.Fatalf("/tmp in the sandbox has mode %q, want 1777", out)
	}
	st, err := os.Stat(filepath.Join(d.Root(), sb.ID(), tmpDir))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSticky == 0 || st.Mode().Perm() != 0o777 {
		t.Fatalf("host directory behind /tmp has mode %v, want sticky 0777", st.Mode())
	}
}

// bubblewrap's root and /dev are tmpfs mounts without a size, outside
// RLIMIT_AS: a sandbox could fill host memory by writing there. / and /dev
// must be read-only and /dev/shm no larger than the memory limit (64 MiB
// without one).
func TestTmpfsWritesAreBoundedByMemoryLimit(t *testing.T) {
	d := newTestDriver(t)
	for _, c := range []struct {
		memMiB, wantMiB int
	}{{48, 48}, {0, defaultShmMiB}} {
		sb := create(t, d, sandbox.Spec{MemoryMiB: c.memMiB})
		res, out, errs := run(t, sb, `for p in /big /dev/big; do touch $p 2>/dev/null && echo "wrote $p"; done
head -c `+strconv.Itoa((c.wantMiB+8)<<20)+` /dev/zero > /dev/shm/big; wc -c < /dev/shm/big; rm /dev/shm/big`, time.Minute)
		if strings.Contains(out, "wrote") {
			t.Fatalf("memory_mib %d: a tmpfs outside the limit is writable: %q", c.memMiB, out)
		}
		lines := strings.Fields(out)
		if len(lines) != 1 {
			t.Fatalf("memory_mib %d: exit %d, out %q, err %q", c.memMiB, res.ExitCode, out, errs)
		}
		n, _ := strconv.Atoi(lines[0])
		if n > c.wantMiB<<20 || n < (c.wantMiB<<20)/2 {
			t.Fatalf("memory_mib %d: /dev/shm took %d bytes, want a tmpfs of %d MiB", c.memMiB, n, c.wantMiB)
		}
	}
}

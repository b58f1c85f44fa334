package local

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// The first create formats an image and keeps it as the root's template;
// the next ones copy it, with no mkfs.ext4 at all, and each copy is a
// filesystem of the sandbox's size and inode count.
func TestLaterCreatesCopyTheTemplate(t *testing.T) {
	d := newDiskDriver(t, 64, 4096)
	first := create(t, d, sandbox.Spec{})
	tmpl := filepath.Join(d.Root(), templateName(d.limitsOf(&meta{})))
	if st, err := os.Stat(tmpl); err != nil || st.Size() != imageBytes(d.limitsOf(&meta{})) {
		t.Fatalf("the first create kept no template of the image's size: %v, %v", st, err)
	}
	d.mkfs = "/bin/false" // any format from here on fails the create
	second := create(t, d, sandbox.Spec{})
	_, _, firstInodes := diskStat(t, d, first)
	for _, sb := range []*sandbox.Sandbox{first, second} {
		// mkfs.ext4 rounds the inodes up to fill its block groups.
		_, used, total := diskStat(t, d, sb)
		if size := diskSize(t, d, sb); size < 60<<20 || size > 64<<20 || total < 4096 || total > 4096+512 || total != firstInodes || used == 0 {
			t.Errorf("%s: a filesystem of %d MiB and %d inodes, want 64 MiB and about 4096, as the first", sb.ID(), size>>20, total)
		}
		if res, out, errs := run(t, sb, "echo hi > f && cat f && touch /tmp/x", time.Minute); res.ExitCode != 0 || out != "hi\n" {
			t.Fatalf("%s: exit %d, %q %q", sb.ID(), res.ExitCode, out, errs)
		}
		if opts := mountOptions(t, d.mountPoint(filepath.Join(d.Root(), nameOf(sb.ID())))); !strings.Contains(opts, "nobarrier") {
			t.Errorf("%s is mounted with %q: without nobarrier, every unmount waits for fsyncs of the image", sb.ID(), opts)
		}
	}
}

// A template that no longer mounts (damaged on the host) fails one create,
// which removes it; the next create formats anew and keeps a good one.
func TestDamagedTemplateIsReplaced(t *testing.T) {
	d := newDiskDriver(t, 64, 4096)
	create(t, d, sandbox.Spec{})
	lim := d.limitsOf(&meta{})
	tmpl := filepath.Join(d.Root(), templateName(lim))
	garbage := strings.Repeat("not a filesystem ", 1<<12)
	f, err := os.OpenFile(tmpl, os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("the first create kept no template: %v", err)
	}
	if _, err := f.WriteAt([]byte(garbage), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte(garbage), 1024); err != nil { // the superblock
		t.Fatal(err)
	}
	f.Close()
	if _, err := sandbox.NewBackend(d).Create(t.Context(), sandbox.Spec{}); err == nil || !strings.Contains(err.Error(), "cannot mount") {
		t.Fatalf("a create from a damaged template: %v, want it to fail to mount", err)
	}
	if _, err := os.Stat(tmpl); !os.IsNotExist(err) {
		t.Fatalf("the damaged template stayed: %v", err)
	}
	sb := create(t, d, sandbox.Spec{})
	if res, _, errs := run(t, sb, "echo hi > f", time.Minute); res.ExitCode != 0 {
		t.Fatalf("after the template was replaced: exit %d, %q", res.ExitCode, errs)
	}
	if _, err := os.Stat(tmpl); err != nil {
		t.Fatalf("no new template: %v", err)
	}
}

// Destroy leaves tearing the filesystem down and freeing its image to
// another goroutine (holdDisk, release): it returns while they still hold
// the image's loop device, with no mount left, and Close waits for them.
func TestDestroyedSandboxesDiskIsReleasedByClose(t *testing.T) {
	d := newDiskDriver(t, 64, 4096)
	hold, held := make(chan struct{}), make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(hold) }) }) // before newDiskDriver's Close runs
	d.beforeRelease = func() { close(held); <-hold }
	sb := create(t, d, sandbox.Spec{})
	var img unix.Stat_t
	if err := unix.Stat(filepath.Join(d.Root(), nameOf(sb.ID()), diskImage), &img); err != nil {
		t.Fatal(err)
	}
	if loops := loopsOf(t, img); len(loops) != 1 {
		t.Fatalf("the sandbox's image is behind loop devices %v, want one", loops)
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	<-held
	if m := mountsUnder(d.Root()); len(m) != 0 {
		t.Fatalf("mounts left after Destroy: %v", m)
	}
	if loops := loopsOf(t, img); len(loops) != 1 {
		t.Fatalf("while its release waits, the destroyed sandbox's image is behind %v, want its loop device still", loops)
	}
	closed := make(chan struct{})
	go func() { d.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a destroyed sandbox's filesystem was still held")
	case <-time.After(100 * time.Millisecond):
	}
	once.Do(func() { close(hold) })
	<-closed
	if loops := loopsOf(t, img); len(loops) != 0 {
		t.Fatalf("after Close the destroyed sandbox's image is still behind %v", loops)
	}
}

// diskSize is the size of the sandbox's filesystem in bytes.
func diskSize(t *testing.T, d *Driver, sb *sandbox.Sandbox) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(d.mountPoint(filepath.Join(d.Root(), nameOf(sb.ID()))), &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks) * st.Bsize
}

// mountOptions reads the options of the mount at mnt from mountinfo.
func mountOptions(t *testing.T, mnt string) string {
	t.Helper()
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) >= 10 && unescapeMount(f[4]) == mnt {
			_, super, _ := strings.Cut(line, " - ")
			return f[5] + " " + super
		}
	}
	t.Fatalf("%s is not mounted", mnt)
	return ""
}

// loopsOf lists the loop devices whose backing file is img, by inode:
// its path changes as Destroy renames and unlinks it.
func loopsOf(t *testing.T, img unix.Stat_t) []string {
	t.Helper()
	names, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		t.Fatal(err)
	}
	var loops []string
	for _, n := range names {
		dev := "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(n)))
		fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // detached meanwhile
		}
		info, err := unix.IoctlLoopGetStatus64(fd)
		unix.Close(fd)
		if err == nil && info.Inode == img.Ino && info.Device == img.Dev {
			loops = append(loops, dev)
		}
	}
	return loops
}

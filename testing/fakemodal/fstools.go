package fakemodal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// fsFileInfo is the JSON shape modal-sandbox-fs-tools prints.
type fsFileInfo struct {
	Name          string  `json:"name"`
	Path          string  `json:"path"`
	Type          string  `json:"type"`
	Size          int64   `json:"size"`
	Mode          uint32  `json:"mode"`
	Permissions   string  `json:"permissions"`
	Owner         string  `json:"owner"`
	Group         string  `json:"group"`
	ModifiedTime  float64 `json:"modified_time"`
	SymlinkTarget *string `json:"symlink_target"`
}

type fsRequest struct {
	WriteFile     *struct{ Path string } `json:"WriteFile"`
	ReadFile      *struct{ Path string } `json:"ReadFile"`
	ListFiles     *struct{ Path string } `json:"ListFiles"`
	Stat          *struct{ Path string } `json:"Stat"`
	MakeDirectory *struct {
		Path    string
		Parents bool
	} `json:"MakeDirectory"`
	Remove *struct {
		Path      string
		Recursive bool
	} `json:"Remove"`
}

// runFSTool plays modal-sandbox-fs-tools on top of the exec driver: the
// result is printed as JSON on stdout, failures as {"error_kind","message"}
// on stderr with exit 1.
func (s *Server) runFSTool(ctx context.Context, sb *fakeSandbox, e *fakeExec, args []string) {
	defer s.work.Done()
	defer e.cancel()
	fail := func(err error) {
		kind := "Other"
		switch {
		case errors.Is(err, sandbox.ErrNotFound), errors.Is(err, fs.ErrNotExist):
			kind = "NotFound"
		case errors.Is(err, sandbox.ErrIsDir):
			kind = "IsDirectory"
		case errors.Is(err, fs.ErrPermission):
			kind = "PermissionDenied"
		}
		msg, _ := json.Marshal(map[string]string{"error_kind": kind, "message": err.Error()})
		e.stderr.Write(msg)
		e.stdout.close()
		e.stderr.close()
		e.exit(int32p(1), nil)
	}
	succeed := func(v any) {
		if v != nil {
			out, _ := json.Marshal(v)
			e.stdout.Write(out)
		}
		e.stdout.close()
		e.stderr.close()
		e.exit(int32p(0), nil)
	}
	var req fsRequest
	if len(args) != 2 || json.Unmarshal([]byte(args[1]), &req) != nil {
		fail(fmt.Errorf("fs-tools: cannot parse request %q", args[1:]))
		return
	}
	drv, id := s.exec, sb.execID
	switch {
	case req.WriteFile != nil:
		err := drv.WriteFile(ctx, id, req.WriteFile.Path, e.stdinR, 0o644)
		e.closeStdin()
		if err != nil {
			fail(err)
			return
		}
		succeed(nil)
	case req.ReadFile != nil:
		rc, _, err := drv.OpenFile(ctx, id, req.ReadFile.Path, -1)
		if err != nil {
			fail(err)
			return
		}
		defer rc.Close()
		// The SDK waits for the exit code before it reads stdout, so the
		// code comes first and the bytes stream after it.
		e.stderr.close()
		e.exit(int32p(0), nil)
		io.Copy(e.stdout, rc) //nolint:errcheck // a short read shows as a short file
		e.stdout.close()
	case req.ListFiles != nil:
		list, err := drv.List(ctx, id, req.ListFiles.Path)
		if err != nil {
			fail(err)
			return
		}
		out := make([]fsFileInfo, 0, len(list))
		for _, fi := range list {
			out = append(out, toFSInfo(fi))
		}
		succeed(out)
	case req.Stat != nil:
		fi, err := drv.Stat(ctx, id, req.Stat.Path)
		if err != nil {
			fail(err)
			return
		}
		succeed(toFSInfo(fi))
	case req.MakeDirectory != nil:
		flag := ""
		if req.MakeDirectory.Parents {
			flag = "-p "
		}
		s.fsShell(ctx, sb, e, "mkdir "+flag+"-- "+shellJoin([]string{req.MakeDirectory.Path}), fail, succeed)
	case req.Remove != nil:
		flag := "-f "
		if req.Remove.Recursive {
			flag = "-rf "
		}
		p := shellJoin([]string{req.Remove.Path})
		s.fsShell(ctx, sb, e, "test -e "+p+" -o -L "+p+" || exit 66; rm "+flag+"-- "+p, fail, succeed)
	default:
		fail(fmt.Errorf("fs-tools: unsupported request %s", args[1]))
	}
}

func (s *Server) fsShell(ctx context.Context, sb *fakeSandbox, e *fakeExec, cmd string, fail func(error), succeed func(any)) {
	var stderr limitedBuffer
	res, err := s.exec.Exec(ctx, sb.execID, sandbox.ExecRequest{Command: cmd, Timeout: 60e9, Stdout: io.Discard, Stderr: &stderr})
	switch {
	case err != nil:
		fail(err)
	case res.ExitCode == 66:
		fail(sandbox.ErrNotFound)
	case res.ExitCode != 0:
		fail(fmt.Errorf("%s", stderr.String()))
	default:
		succeed(nil)
	}
}

type limitedBuffer struct{ b []byte }

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := 4096 - len(l.b); room > 0 {
		if len(p) < room {
			room = len(p)
		}
		l.b = append(l.b, p[:room]...)
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string { return string(l.b) }

func toFSInfo(fi sandbox.FileInfo) fsFileInfo {
	typ := "file"
	switch {
	case fi.Mode.IsDir():
		typ = "directory"
	case fi.Mode&fs.ModeSymlink != 0:
		typ = "symlink"
	}
	name := fi.Name
	if name == "" {
		name = path.Base(fi.Path)
	}
	return fsFileInfo{
		Name: name, Path: fi.Path, Type: typ, Size: fi.Size,
		Mode: unixMode(fi.Mode), Permissions: fi.Mode.Perm().String(),
		ModifiedTime: float64(fi.ModTime.UnixNano()) / 1e9,
	}
}

// unixMode turns a Go FileMode into st_mode bits, which is what fs-tools
// reports and what clients decode type bits from.
func unixMode(m fs.FileMode) uint32 {
	const (
		sIFREG  = 0o100000
		sIFDIR  = 0o040000
		sIFLNK  = 0o120000
		sIFIFO  = 0o010000
		sIFSOCK = 0o140000
		sIFCHR  = 0o020000
		sIFBLK  = 0o060000
	)
	out := uint32(m.Perm())
	switch {
	case m.IsDir():
		out |= sIFDIR
	case m&fs.ModeSymlink != 0:
		out |= sIFLNK
	case m&fs.ModeNamedPipe != 0:
		out |= sIFIFO
	case m&fs.ModeSocket != 0:
		out |= sIFSOCK
	case m&fs.ModeCharDevice != 0:
		out |= sIFCHR
	case m&fs.ModeDevice != 0:
		out |= sIFBLK
	default:
		out |= sIFREG
	}
	return out
}

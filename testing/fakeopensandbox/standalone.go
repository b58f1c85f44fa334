package fakeopensandbox

import (
	"errors"
	"net/http"
	"os"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// ExecdOptions configure an execd served on its own, without the
// lifecycle API (NewExecd): the execd stand-in that runs inside a real
// OpenSandbox server's containers (testing/osstandin/execd).
type ExecdOptions struct {
	// Driver runs the commands and the file scripts; every call names the
	// sandbox SelfID.
	Driver driver.Driver
	// Workdir is where relative paths resolve (execd's working directory).
	Workdir string
	// Version is the execd build to imitate; default VersionMain.
	Version string
	// Spool is a directory for upload bodies; default os.TempDir().
	Spool string
	// OverlayFS: the files live on a container's overlay file system, where
	// execd answers a directory download with 500 "seeker can't seek".
	OverlayFS bool
	Logger    hclog.Logger
}

// SelfID is the sandbox id an ExecdOptions.Driver is called with.
const SelfID = "self"

// NewExecd serves execd's API (the routes of execd.go, files.go and
// fileops.go, answered as in the fake) for the one sandbox opts.Driver
// runs: every path is writable, as in a container. stop ends running
// commands' streams.
func NewExecd(opts ExecdOptions) (h http.Handler, stop func(), err error) {
	if opts.Driver == nil {
		return nil, nil, errors.New("fakeopensandbox.NewExecd: no driver")
	}
	if opts.Version == "" {
		opts.Version = VersionMain
	}
	if opts.Spool == "" {
		opts.Spool = os.TempDir()
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	s := &Server{
		opts: Options{Version: opts.Version, Workdir: opts.Workdir, Linger: defaultLinger, OverlayFS: opts.OverlayFS},
		drv:  opts.Driver, log: opts.Logger, closing: make(chan struct{}), spool: opts.Spool,
		sandboxes: map[string]*sbx{}, faults: map[string][]Fault{}, calls: map[string]int{},
		writableAll: true,
	}
	b := &sbx{id: SelfID, gone: make(chan struct{}), cmds: map[string]*command{}}
	s.sandboxes[b.id] = b
	h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.serveExecd(w, r, b, r.URL.Path) })
	return h, func() { close(s.closing) }, nil
}

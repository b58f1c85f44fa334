// Package onep starts a task process on one P (GOMAXPROCS=1).
//
// It has to happen in a package init, right after package os: the
// runtime has by then put the main goroutine on the second P in about
// six starts out of ten, and every allocation of the later inits fills
// that P's span cache. Lowering GOMAXPROCS destroys the second P, and
// the later that happens the more its cache costs to hand back (page
// faults for the central lists' blocks, then refills on the first P):
// lowering in RunMain cost a ping task 5% more CPU than lowering here
// (e2e/startup's harness, 400 paired runs), with the second P's warm
// cache the difference between 340 and 460 page faults per start.
// Package bundles gives the task the runtime's default back once it has
// run for a while (see bundles.parallelismDelay).
package onep

import (
	"os"
	"runtime"
	"strings"
)

var lowered bool

func init() {
	if Wanted(os.Args[1:], os.LookupEnv, runtime.GOMAXPROCS(0)) {
		runtime.GOMAXPROCS(1)
		lowered = true
	}
}

// Lowered reports whether this process started on one P.
func Lowered() bool { return lowered }

// Wanted reports whether a process started with args (os.Args[1:]) may
// start on one P: it was started as Airflow starts a task instance (only
// --comm and --logs, each as --flag=value or --flag value), GOMAXPROCS is
// not set in its environment (the operator's value wins), and it has more
// than one P (procs).
func Wanted(args []string, lookupEnv func(string) (string, bool), procs int) bool {
	if _, pinned := lookupEnv("GOMAXPROCS"); pinned || procs < 2 {
		return false
	}
	seen := map[string]bool{}
	for i := 0; i < len(args); i++ {
		name, _, hasValue := strings.Cut(args[i], "=")
		if name != "--comm" && name != "--logs" || seen[name] {
			return false
		}
		seen[name] = true
		if !hasValue {
			i++ // the value is the next argument
		}
	}
	return seen["--comm"] && seen["--logs"]
}

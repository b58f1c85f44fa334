// Command airflow-go-worker is the standard bundle: the task catalogue
// driven by a YAML bundle config. Its default build links the local
// backend and file://; the other backends and stores (s3:// too) are
// extras chosen when it is built (extras.go: make build EXTRAS="s3 modal",
// or EXTRAS=all). Airflow's ExecutableCoordinator forks it once per
// task instance; it also packs itself into an AFBNDL01 bundle, inspects
// bundles, runs tasks locally through a real supervisor, and sweeps
// leftover sandboxes (see package catalogue).
package main

import (
	"context"
	"io"

	"github.com/airflow-sandbox/airflow-go-worker/catalogue"
)

func main() { catalogue.Main() }

// realMain is main's command line, for the tests.
func realMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return catalogue.Run(ctx, args, stdout, stderr)
}

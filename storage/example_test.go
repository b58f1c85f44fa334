package storage_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

// Two files land together or not at all. The destinations are file:// URLs
// under a directory the worker's operator allows (AIRFLOW_GO_WORKER_FILE_ROOTS);
// an s3://, gs:// or abfs:// URL works the same once its store is linked.
func ExampleExport() {
	root, err := os.MkdirTemp("", "export-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(root)
	os.Setenv(storage.FileRootsEnv, root)
	defer os.Unsetenv(storage.FileRootsEnv)

	ctx := context.Background()
	files := map[string]string{
		"file://" + filepath.Join(root, "out/report.csv"):  "id,total\n1,42\n",
		"file://" + filepath.Join(root, "out/summary.txt"): "1 row\n",
	}

	// One handle for the task: each bucket is opened once, on first use.
	h := storage.Default.NewHandle(storage.Options{})
	defer h.Close()
	e := h.NewExport()
	defer e.Abort(ctx) // a no-op once Commit succeeded
	for raw, body := range files {
		dest, err := storage.Default.Parse(raw) // the URL is checked here, once
		if err != nil {
			fmt.Println(err)
			return
		}
		if _, err := e.Stage(ctx, dest, strings.NewReader(body), int64(len(body))); err != nil {
			fmt.Println(err)
			return
		}
	}
	// Nothing is at the destinations yet: the staged files are invisible.
	_, err = os.Stat(filepath.Join(root, "out/report.csv"))
	fmt.Println("before commit, report.csv exists:", err == nil)

	urls, err := e.Commit(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("committed", len(urls), "files")
	got, _ := os.ReadFile(filepath.Join(root, "out/report.csv"))
	fmt.Print(string(got))
	// Output:
	// before commit, report.csv exists: false
	// committed 2 files
	// id,total
	// 1,42
}

package bundles_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/taskinfo"
)

// ReportInput is a task's input: each field binds by its json name, from
// (highest first) a binding such as WithXCom, the dag_run.conf keys
// AllowConf lets a run set, WithDefaults, or the zero value.
type ReportInput struct {
	Rows   []int  `json:"rows"`
	Title  string `json:"title"`
	Format string `json:"format"`
}

// A Go bundle registers its functions in main, then hands the bundle to
// cli.Main; here the registration is inspected instead, as the bundle's
// tools see it (package taskinfo). Register panics on
// a registration that cannot work (a default naming no input, a bad id):
// Add is the same and returns the error.
func ExampleBundle_Register() {
	b := bundles.New()
	b.Register("reports", "extract", func(ctx context.Context) ([]int, error) {
		return []int{3, 1, 2}, nil // pushed as XCom return_value
	})
	b.Register("reports", "render", func(ctx context.Context, ti bundles.TaskInstance, in ReportInput) (string, error) {
		return fmt.Sprintf("%s (%s): %d rows", in.Title, in.Format, len(in.Rows)), nil
	},
		bundles.WithXCom("rows", "extract"),                                      // extract's return_value
		bundles.WithDefaults(map[string]any{"title": "Daily", "format": "text"}), // unless a run sets them
		bundles.AllowConf("format"),                                              // a trigger may set format
	)

	// What the bundle's own tools (describe, check) see of render:
	for _, t := range taskinfo.Describe(b) {
		if t.TaskID == "render" {
			fmt.Println("render's inputs:", strings.Join(t.Inputs, ", "))
			fmt.Println("rows comes from:", t.XComInputs["rows"].Task, t.XComInputs["rows"].Key)
		}
	}

	err := b.Add("reports", "broken", func(in ReportInput) error { return nil },
		bundles.WithDefaults(map[string]any{"titel": "x"}))
	fmt.Println(err)
	// Output:
	// render's inputs: rows, title, format
	// rows comes from: extract return_value
	// task reports.broken: default "titel" matches no input field (fields: rows, title, format)
}

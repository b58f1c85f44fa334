// Package taskinfo is the bundle's own tools' view of a Bundle (check,
// describe, the coordinator's parse answer): what each task's registration
// says about its wiring and the stub attributes it declares. Task authors
// never build or read these; keeping them here keeps `go doc ./bundles` to
// the author's API.
package taskinfo

import (
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
)

// Task is one registered task as the tools see it.
type Task struct {
	DagID, TaskID string
	// Inputs are the input names the task accepts (json names, in field
	// order), nil when it takes no input struct.
	Inputs []string
	// XComInputs maps an input to the XCom of the same run it is bound to.
	XComInputs map[string]XComRef
	// ParamInputs maps an input to the Dag param it is bound to.
	ParamInputs map[string]Param
	// Templates maps an input to the template it renders (WithTemplate).
	Templates map[string]string
	// Defaults are the registered defaults, by input name.
	Defaults map[string]any
	// Outlets and Aliases are the assets and asset aliases the task reports.
	Outlets []protocol.AssetKey
	Aliases []string
	// Expansions map an input to the list whose element a mapped instance
	// takes.
	Expansions map[string]Expansion
	// FeedsMapping says the task pushes its return value with its length,
	// for a mapped task that expands over it.
	FeedsMapping bool
	// ReturnsValue says the function returns (T, error), whose T becomes
	// the return_value XCom.
	ReturnsValue bool
	// The stub attributes the Go side declares.
	ExecutionTimeout time.Duration
	MultipleOutputs  bool
	Branch           []string
	BranchJoins      map[string][]string
}

// XComRef is an XCom of the current run: task and key.
type XComRef struct {
	Task string `json:"task"`
	Key  string `json:"key"`
}

// Param is an input's Dag param binding.
type Param struct {
	Name string `json:"param"`
}

// Expansion is how a mapped task's input takes its element: of the list
// upstream task XComTask returned, or of Items.
type Expansion struct {
	XComTask string `json:"xcom,omitempty"`
	Items    []any  `json:"items,omitempty"`
	// Literal says Items is the list (possibly empty).
	Literal bool `json:"literal,omitempty"`
}

// Describe lists a *bundles.Bundle's tasks in registration order. Package
// bundles sets it (it cannot be a method without showing in the author's
// API, nor a function here without an import cycle).
var Describe func(bundle any) []Task

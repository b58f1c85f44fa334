package check

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/taskinfo"
)

// Description is what a bundle's describe command prints: every task and
// the inputs it reads from an upstream task's XCom.
type Description struct {
	Dags map[string]map[string]TaskDescription `json:"dags"` // dag_id -> task_id -> task
}

// TaskDescription is one task of a Description.
type TaskDescription struct {
	// XComInputs maps an input name to the XCom it is bound to.
	XComInputs map[string]XComInput `json:"xcom_inputs"`
	// DataModel says the bundle describes its outlets and mapping (one
	// built before them does not, and they go unchecked).
	DataModel bool `json:"data_model,omitempty"`
	// Outlets are the assets and aliases the task reports when it
	// succeeds, as Airflow's AssetProfile (type, name, uri).
	Outlets []OutletDescription `json:"outlets,omitempty"`
	// Expansions map an input to the list whose element a mapped
	// instance takes (an upstream's XCom, or literal items).
	Expansions map[string]taskinfo.Expansion `json:"expansions,omitempty"`
	// FeedsMapping says the task pushes its return value with its length,
	// for a mapped task that expands over it.
	FeedsMapping bool `json:"feeds_mapping,omitempty"`
	// Attributes says the bundle describes the stub attributes below (one
	// built before them does not, and they go unchecked).
	Attributes bool `json:"attributes,omitempty"`
	// ExecutionTimeout is the task's execution timeout in seconds (0:
	// none).
	ExecutionTimeout float64 `json:"execution_timeout_seconds,omitempty"`
	// MultipleOutputs says each key of the result is pushed as an XCom.
	MultipleOutputs bool `json:"multiple_outputs,omitempty"`
	// ReturnsValue says the task pushes a return_value XCom.
	ReturnsValue bool `json:"returns_value,omitempty"`
	// Inputs are the task's input names (nil: it takes no input struct).
	Inputs []string `json:"inputs,omitempty"`
	// ParamInputs maps an input to the Dag param it is bound to, and
	// Defaults are the inputs' registered defaults.
	ParamInputs map[string]string `json:"param_inputs,omitempty"`
	Defaults    map[string]any    `json:"defaults,omitempty"`
	// Templates maps an input to the template it renders, as Airflow
	// renders a stub argument.
	Templates map[string]string `json:"templates,omitempty"`
	// Branch lists the downstream tasks of a branch; BranchJoins maps one
	// of them to those it is also downstream of.
	Branch      []string            `json:"branch,omitempty"`
	BranchJoins map[string][]string `json:"branch_joins,omitempty"`
}

// OutletDescription is one outlet as the task reports it.
type OutletDescription struct {
	Type string `json:"type"`
	Name string `json:"name,omitempty"`
	URI  string `json:"uri,omitempty"`
}

// XComInput names the upstream task and key an input reads.
type XComInput struct {
	Task string `json:"task"`
	Key  string `json:"key"`
}

// Describe describes b.
func Describe(b *bundles.Bundle) Description {
	d := Description{Dags: map[string]map[string]TaskDescription{}}
	for _, t := range taskinfo.Describe(b) {
		td := TaskDescription{XComInputs: map[string]XComInput{}}
		for input, x := range t.XComInputs {
			td.XComInputs[input] = XComInput{Task: x.Task, Key: x.Key}
		}
		describeDataModel(t, &td)
		describeAttributes(t, &td)
		if d.Dags[t.DagID] == nil {
			d.Dags[t.DagID] = map[string]TaskDescription{}
		}
		d.Dags[t.DagID][t.TaskID] = td
	}
	return d
}

// describeAttributes adds the stub attributes a task declares.
func describeAttributes(t taskinfo.Task, td *TaskDescription) {
	td.Attributes = true
	td.Inputs = t.Inputs
	td.ExecutionTimeout = t.ExecutionTimeout.Seconds()
	td.MultipleOutputs, td.ReturnsValue = t.MultipleOutputs, t.ReturnsValue
	td.Defaults, td.Templates, td.Branch, td.BranchJoins = t.Defaults, t.Templates, t.Branch, t.BranchJoins
	for input, p := range t.ParamInputs {
		if td.ParamInputs == nil {
			td.ParamInputs = map[string]string{}
		}
		td.ParamInputs[input] = p.Name
	}
}

// describeTimeout bounds one bundle's describe: it only registers its
// tasks (the standard bundle loads its packed config) and prints them.
const describeTimeout = 60 * time.Second

// describeBundle runs path's describe command. A bundle built with another
// SDK, or with a release of this one from before describe, fails it.
func describeBundle(ctx context.Context, path string) (Description, error) {
	ctx, cancel := context.WithTimeout(ctx, describeTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, "describe")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return Description{}, fmt.Errorf("%s describe: %v: %s", path, err, lastLine(stderr.String()))
	}
	var d Description
	if err := json.Unmarshal(stdout.Bytes(), &d); err != nil {
		return Description{}, fmt.Errorf("%s describe printed no description: %v", path, err)
	}
	return d, nil
}

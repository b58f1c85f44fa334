package check

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/internal/taskinfo"
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
	for dagID, taskID := range b.Tasks() {
		bound, _ := b.XComBindings(dagID, taskID)
		td := TaskDescription{XComInputs: map[string]XComInput{}}
		for input, x := range bound {
			td.XComInputs[input] = XComInput{Task: x.TaskID, Key: x.Key}
		}
		describeDataModel(b, dagID, taskID, &td)
		if d.Dags[dagID] == nil {
			d.Dags[dagID] = map[string]TaskDescription{}
		}
		d.Dags[dagID][taskID] = td
	}
	return d
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

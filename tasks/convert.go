package tasks

import (
	"context"
	"errors"
	"fmt"
)

// ConvertInput is a whole artifact conversion job: the sandbox to create
// (the fields of ProvisionInput, flat, since the bundle runtime binds
// top-level fields), the commands and the outputs to export.
type ConvertInput struct {
	Backend           string               `json:"backend,omitempty"`
	ConnID            string               `json:"conn_id,omitempty"`
	AppName           string               `json:"app_name,omitempty"`
	GPU               string               `json:"gpu,omitempty"`
	Regions           []string             `json:"regions,omitempty"`
	Cloud             string               `json:"cloud,omitempty"`
	EgressEnforcement string               `json:"egress_enforcement,omitempty"`
	IgnoreImage       bool                 `json:"ignore_image,omitempty"`
	Image             string               `json:"image,omitempty"`
	CPU               float64              `json:"cpu,omitempty"`
	MemoryMiB         int                  `json:"memory_mib,omitempty"`
	Lifetime          Duration             `json:"lifetime,omitempty"`
	Workdir           string               `json:"workdir,omitempty"`
	Env               map[string]string    `json:"env,omitempty"`
	EnvFrom           map[string]EnvSource `json:"env_from,omitempty"`
	Network           *Network             `json:"network,omitempty"`
	Owner             string               `json:"owner,omitempty"`
	Tags              map[string]string    `json:"tags,omitempty"`
	StageIn           map[string]string    `json:"stage_in,omitempty"`
	StorageConnID     string               `json:"storage_conn_id,omitempty"`

	Command      Commands          `json:"command"`
	Timeout      Duration          `json:"timeout,omitempty"`
	Exports      map[string]string `json:"exports"`
	ExportConnID string            `json:"export_conn_id,omitempty"`
	MaxBytes     int64             `json:"max_bytes,omitempty"`
}

func (in ConvertInput) provisionInput() ProvisionInput {
	return ProvisionInput{
		Backend: in.Backend, ConnID: in.ConnID, AppName: in.AppName, GPU: in.GPU, Regions: in.Regions,
		Cloud: in.Cloud, EgressEnforcement: in.EgressEnforcement, IgnoreImage: in.IgnoreImage,
		Image: in.Image, CPU: in.CPU, MemoryMiB: in.MemoryMiB, Lifetime: in.Lifetime, Workdir: in.Workdir,
		Env: in.Env, EnvFrom: in.EnvFrom, Network: in.Network, Owner: in.Owner, Tags: in.Tags,
		StageIn: in.StageIn, StorageConnID: in.StorageConnID,
	}
}

// ConvertResult is what a conversion produced.
type ConvertResult struct {
	URLs       []string `json:"urls"`
	ExitCode   int      `json:"exit_code"`
	OutputTail string   `json:"output_tail"`
}

// Convert provisions a sandbox, stages the inputs in, runs the commands,
// exports the outputs and destroys the sandbox, always. Nothing is exported
// unless every command succeeded.
func Convert(ctx context.Context, d Deps, in ConvertInput) (ConvertResult, error) {
	if err := d.check(); err != nil {
		return ConvertResult{}, err
	}
	if len(in.Command) == 0 {
		return ConvertResult{}, errors.New("command: nothing to run; give the conversion command")
	}
	// Check the outputs before paying for a sandbox.
	if err := checkExports(in.Exports); err != nil {
		return ConvertResult{}, err
	}
	sb, drv, rec, secrets, err := provision(ctx, d, in.provisionInput())
	if err != nil {
		return ConvertResult{}, err
	}
	defer drv.Close()
	defer destroyQuietly(d, sb)
	d.logger().Info("sandbox ready", "backend", rec.Backend, "id", rec.ID)
	var res RunResult
	for _, cmd := range in.Command {
		res, err = runOne(ctx, d, sb, cmd, execOptions(in.Timeout, nil, ""), newRedactor(secrets))
		if err != nil {
			return ConvertResult{ExitCode: res.ExitCode, OutputTail: res.OutputTail}, err
		}
		if res.ExitCode != 0 || res.TimedOut {
			return ConvertResult{ExitCode: res.ExitCode, OutputTail: res.OutputTail},
				fmt.Errorf("conversion failed, nothing was exported: %w", &CommandError{Command: cmd, Result: res})
		}
	}
	urls, err := exportFrom(ctx, d, sb, in.Exports, in.ExportConnID, in.MaxBytes)
	if err != nil {
		return ConvertResult{ExitCode: res.ExitCode, OutputTail: res.OutputTail}, err
	}
	return ConvertResult{URLs: urls, ExitCode: res.ExitCode, OutputTail: res.OutputTail}, nil
}

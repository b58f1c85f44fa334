package main

import (
	"os"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
	"github.com/airflow-sandbox/airflow-go-worker/catalogue"
	_ "github.com/airflow-sandbox/airflow-go-worker/sandbox/local" // the only backend the demo's copy names
	_ "github.com/airflow-sandbox/airflow-go-worker/storage/s3"    // its files move through S3
)

// The demo's copy of the shipped conversion config runs on the local
// backend in every task, carries no other backend's options (so a binary
// linking only the local backend loads it), and is a config the catalogue
// accepts; the shipped file stays on Modal.
// taskDefaults is the part of a bundle config the test reads: each task's
// defaults.
type taskDefaults struct {
	Dags map[string]struct {
		Tasks map[string]struct {
			Defaults map[string]any `yaml:"defaults"`
		} `yaml:"tasks"`
	} `yaml:"dags"`
}

func TestLocalConfigCopy(t *testing.T) {
	src := filepath.Join("..", "conversion", "bundle.yaml")
	dst := filepath.Join(t.TempDir(), "conversion-local.yaml")
	if err := writeLocalConfig(src, dst); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Backends     map[string]any `yaml:"backends"`
		taskDefaults `yaml:",inline"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("the copy is not YAML: %v\n%s", err, data)
	}
	tasks := 0
	for dagID, dag := range cfg.Dags {
		for taskID, task := range dag.Tasks {
			tasks++
			if task.Defaults["backend"] != "local" {
				t.Errorf("%s.%s has backend %v in the copy, want local", dagID, taskID, task.Defaults["backend"])
			}
		}
	}
	if tasks == 0 {
		t.Fatalf("the copy has no tasks:\n%s", data)
	}
	if len(cfg.Backends) != 1 || cfg.Backends["local"] == nil {
		t.Errorf("the copy's backends: section is %v, want only local's options", cfg.Backends)
	}
	if err := catalogue.Load(bundles.New(), data, dst); err != nil {
		t.Errorf("the catalogue refuses the copy: %v", err)
	}

	shipped, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var orig taskDefaults
	if err := yaml.Unmarshal(shipped, &orig); err != nil {
		t.Fatal(err)
	}
	if b := orig.Dags["sandbox_conversion"].Tasks["convert"].Defaults["backend"]; b != "modal" {
		t.Errorf("the shipped conversion config's backend is %v, want modal", b)
	}
}

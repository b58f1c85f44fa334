package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func loadYAML(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func tasksOf(cfg map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	for dagID, d := range cfg["dags"].(map[string]any) {
		for taskID, t := range d.(map[string]any)["tasks"].(map[string]any) {
			out[dagID+"."+taskID] = t.(map[string]any)
		}
	}
	return out
}

// Every standard-bundle example the driver runs ends up on the local
// backend, with nothing else changed: same tasks, same commands and URLs.
func TestLocalVariantOfEachExample(t *testing.T) {
	for _, s := range scenarios {
		if s.goMain {
			continue
		}
		t.Run(s.example, func(t *testing.T) {
			path := filepath.Join("..", "..", "examples", s.example, "bundle.yaml")
			orig, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			out, changed, err := localVariant(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(changed) == 0 {
				t.Fatal("no change reported")
			}
			before, after := tasksOf(loadYAML(t, orig)), tasksOf(loadYAML(t, out))
			if len(before) != len(after) {
				t.Fatalf("tasks %d -> %d", len(before), len(after))
			}
			for id, tb := range before {
				ta := after[id]
				db, _ := tb["defaults"].(map[string]any)
				da, _ := ta["defaults"].(map[string]any)
				if b, ok := da["backend"]; ok && b != "local" {
					t.Errorf("%s: backend %v, want local", id, b)
				}
				if _, ok := db["image"]; ok && da["ignore_image"] != true {
					t.Errorf("%s: has an image but no ignore_image", id)
				}
				if db["backend"] != nil && db["backend"] != "local" && da["conn_id"] != nil {
					t.Errorf("%s: kept the remote backend's conn_id %v", id, da["conn_id"])
				}
				for k, v := range db {
					if k == "backend" || k == "conn_id" {
						continue
					}
					if !reflect.DeepEqual(da[k], v) {
						t.Errorf("%s: %s changed from %v to %v", id, k, v, da[k])
					}
				}
				if !reflect.DeepEqual(ta["inputs"], tb["inputs"]) || ta["kind"] != tb["kind"] {
					t.Errorf("%s: kind or inputs changed", id)
				}
			}
		})
	}
}

func TestLocalVariantRefusesAConfigNamingNoBackend(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.yaml")
	os.WriteFile(path, []byte("dags:\n  d:\n    tasks:\n      t: {kind: run, defaults: {command: true}}\n"), 0o644)
	if _, _, err := localVariant(path); err == nil || !strings.Contains(err.Error(), "names no backend") {
		t.Fatalf("err = %v", err)
	}
}

// Each scenario names an example whose stub Dag has that dag_id, so the
// driver waits for the Dag the file really defines.
func TestScenariosMatchTheirExamples(t *testing.T) {
	for _, s := range scenarios {
		data, err := os.ReadFile(filepath.Join("..", "..", "examples", s.example, "dag.py"))
		if err != nil {
			t.Fatalf("%s: %v", s.dagID, err)
		}
		if !strings.Contains(string(data), `dag_id="`+s.dagID+`"`) {
			t.Errorf("examples/%s/dag.py does not define dag_id %q", s.example, s.dagID)
		}
	}
}

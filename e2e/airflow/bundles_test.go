package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Each scenario names an example whose stub Dag has that dag_id, so the
// driver waits for the Dag the file really defines.
func TestScenariosMatchTheirExamples(t *testing.T) {
	for _, s := range scenarios {
		data, err := os.ReadFile(filepath.Join("..", "..", s.dir(), "dag.py"))
		if err != nil {
			t.Fatalf("%s: %v", s.dagID, err)
		}
		if !strings.Contains(string(data), `dag_id="`+s.dagID+`"`) {
			t.Errorf("%s/dag.py does not define dag_id %q", s.dir(), s.dagID)
		}
	}
}

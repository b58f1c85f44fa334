package cli

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/check"
)

// describe prints check.Describe of the bundle: check runs it in every
// bundle it finds, to compare XCom bindings with the Dags' edges.
func (p Program) describe(args []string, stdout io.Writer) error {
	if len(args) > 0 {
		return fmt.Errorf("describe takes no arguments, got %q", args[0])
	}
	b, err := p.Bundle()
	if err != nil {
		return err
	}
	out, err := json.MarshalIndent(check.Describe(b), "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s\n", out)
	return err
}

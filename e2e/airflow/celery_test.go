package main

import (
	"reflect"
	"testing"
)

// The control plane's environment loses exactly the worker-only settings
// (docs/deploying.md: they belong on the workers), MODAL_ as a prefix.
func TestWorkerOnlySettingsLeaveTheControlPlane(t *testing.T) {
	env := []string{"AIRFLOW__SDK__COORDINATORS={}", "AIRFLOW__SDK__QUEUE_TO_COORDINATOR={}", "XDG_STATE_HOME=/s",
		"MODAL_SERVER_URL=http://x", "MODAL_CONFIG_PATH=/none", "AIRFLOW_HOME=/h", "MODALITY=kept", "PATH=/bin"}
	got := withoutEnv(env, workerOnly...)
	if want := []string{"AIRFLOW_HOME=/h", "MODALITY=kept", "PATH=/bin"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("withoutEnv = %q, want %q", got, want)
	}
}

// withEnv replaces a key wherever it was and adds new ones, once each.
func TestWithEnvReplacesAndAdds(t *testing.T) {
	got := withEnv([]string{"A=1", "B=2", "A=3"}, map[string]string{"A": "new", "C": "c"})
	if want := []string{"B=2", "A=new", "C=c"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("withEnv = %q, want %q", got, want)
	}
}

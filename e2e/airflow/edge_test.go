package main

import (
	"reflect"
	"testing"
)

// An edge worker keeps [api_auth] jwt_secret (it signs its Edge API
// requests with it; without it registration is refused with 403) and runs
// without the database URL, [api] secret_key and api_enabled; a Celery
// worker runs without jwt_secret (docs/deploying.md).
func TestWorkerSettingsPerFlavor(t *testing.T) {
	env := []string{"AIRFLOW__API_AUTH__JWT_SECRET=s", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=postgresql+psycopg2://x",
		"AIRFLOW__API__SECRET_KEY=k", "AIRFLOW__EDGE__API_ENABLED=True", "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=/p", "AIRFLOW_HOME=/h"}
	edge := withoutEnv(env, edgeFlavor{}.offWorkers()...)
	if want := []string{"AIRFLOW__API_AUTH__JWT_SECRET=s", "AIRFLOW_HOME=/h"}; !reflect.DeepEqual(edge, want) {
		t.Errorf("edge worker env = %q, want %q", edge, want)
	}
	celery := withoutEnv(env, celeryFlavor{}.offWorkers()...)
	if want := []string{"AIRFLOW__API__SECRET_KEY=k", "AIRFLOW__EDGE__API_ENABLED=True", "AIRFLOW_HOME=/h"}; !reflect.DeepEqual(celery, want) {
		t.Errorf("celery worker env = %q, want %q", celery, want)
	}
}

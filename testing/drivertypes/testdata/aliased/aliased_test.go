package aliased

import "github.com/airflow-sandbox/airflow-go-worker/sandbox"

// Tests may use the portable API: not counted.
var _ sandbox.Spec

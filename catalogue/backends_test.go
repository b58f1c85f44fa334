package catalogue

// The tests load configs for every backend the standard bundle links.
import (
	_ "github.com/airflow-sandbox/airflow-go-worker/sandbox/local"
	_ "github.com/airflow-sandbox/airflow-go-worker/sandbox/modal"
	_ "github.com/airflow-sandbox/airflow-go-worker/sandbox/opensandbox"
)

package catalogue

// The tests load configs for every backend the standard bundle links, and
// for s3:// URLs (its s3 extra).
import (
	_ "github.com/airflow-sandbox/airflow-go-worker/sandbox/local"
	_ "github.com/airflow-sandbox/airflow-go-worker/sandbox/modal"
	_ "github.com/airflow-sandbox/airflow-go-worker/sandbox/opensandbox"
	_ "github.com/airflow-sandbox/airflow-go-worker/storage/s3"
)

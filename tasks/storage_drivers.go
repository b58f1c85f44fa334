package tasks

// The cloud drivers DefaultStorage serves beyond s3:// and file://. Each
// links its SDK into every bundle that imports package tasks; a bundle
// that needs neither can drop these imports (issue 11 moves them to the
// bundle's main).
import (
	_ "github.com/airflow-sandbox/airflow-go-worker/storage/azure"
	_ "github.com/airflow-sandbox/airflow-go-worker/storage/gcs"
)

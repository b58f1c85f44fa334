package tasks

// The tasks' tests resolve gs:// and abfs:// URLs as a binary linking those
// stores does, and the stores' own drivers parse their connections: link
// them. Transfers go through the fake Storage, so no real bucket is opened
// (storage/gcs and storage/azure test those).
import (
	_ "github.com/airflow-sandbox/airflow-go-worker/storage/azure"
	_ "github.com/airflow-sandbox/airflow-go-worker/storage/gcs"
)

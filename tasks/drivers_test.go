package tasks

// The tasks' tests resolve s3://, gs:// and abfs:// URLs as a binary
// linking those stores does, and the stores' own drivers parse their
// connections: link them (package tasks itself links none, so a Go
// bundle links a store only by importing it). Transfers go through the
// fake Storage, so no real bucket is opened (storage/s3, storage/gcs and
// storage/azure test those).
import (
	_ "github.com/airflow-sandbox/airflow-go-worker/storage/azure"
	_ "github.com/airflow-sandbox/airflow-go-worker/storage/gcs"
	_ "github.com/airflow-sandbox/airflow-go-worker/storage/s3"
)

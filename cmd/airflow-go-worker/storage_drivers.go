package main

// The standard bundle serves every store: gs:// and Azure Blob URLs need
// these driver packages, which register themselves. They are imported here,
// not in package tasks, so that a bundle of one's own links Google's and
// Azure's SDKs only if it imports them too (the GCS client alone adds about
// 40 MB to the binary and a few milliseconds of init).
import (
	_ "github.com/airflow-sandbox/airflow-go-worker/storage/azure"
	_ "github.com/airflow-sandbox/airflow-go-worker/storage/gcs"
)

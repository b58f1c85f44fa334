package main

import (
	"github.com/airflow-sandbox/airflow-go-worker/bundles"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/selftest"
	_ "github.com/airflow-sandbox/airflow-go-worker/storage/gcs"
)

func main() { b := bundles.New(); selftest.Register(b); bundles.Main(b) }

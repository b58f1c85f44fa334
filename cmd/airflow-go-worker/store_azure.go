//go:build store_azure || all_extras

package main

// abfs:// (az://, abfss://, azblob://) URLs.
import _ "github.com/airflow-sandbox/airflow-go-worker/storage/azure"

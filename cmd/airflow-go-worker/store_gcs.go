//go:build store_gcs || all_extras

package main

// gs:// URLs. Google's client adds megabytes and milliseconds of init to
// every task start, so it is linked only when asked for.
import _ "github.com/airflow-sandbox/airflow-go-worker/storage/gcs"

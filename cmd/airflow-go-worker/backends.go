package main

// The sandbox backends the standard bundle links (its storage drivers are
// in storage_drivers.go). Each package registers itself (sandbox/registry);
// a bundle that needs fewer imports fewer, and links (and starts) only
// those.
import (
	_ "github.com/airflow-sandbox/airflow-go-worker/sandbox/local"
	_ "github.com/airflow-sandbox/airflow-go-worker/sandbox/modal"
	_ "github.com/airflow-sandbox/airflow-go-worker/sandbox/opensandbox"
)

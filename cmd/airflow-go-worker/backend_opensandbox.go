//go:build backend_opensandbox || all_extras

package main

import _ "github.com/airflow-sandbox/airflow-go-worker/sandbox/opensandbox"

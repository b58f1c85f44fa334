// Command localstandard is the standard bundle (the catalogue and its YAML
// config) built with one sandbox backend, local, and s3:// and file://
// storage: what a bundle that imports only what it uses starts like, beside
// the standard binary, which links every backend and store.
package main

import (
	"github.com/airflow-sandbox/airflow-go-worker/catalogue"
	_ "github.com/airflow-sandbox/airflow-go-worker/sandbox/local"
)

func main() { catalogue.Main() }

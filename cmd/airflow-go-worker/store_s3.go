//go:build store_s3 || all_extras

package main

// s3:// (s3a://) URLs. The AWS SDK's default credential chain (SSO, shared
// config, ...) adds its package inits to every task start, so it is linked
// only when asked for.
import _ "github.com/airflow-sandbox/airflow-go-worker/storage/s3"

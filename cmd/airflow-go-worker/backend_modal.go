//go:build backend_modal || all_extras

package main

// Modal's Go SDK alone costs a binary about 4x a trivial one's start-up
// CPU (gRPC, protobuf descriptors), so it is linked only when asked for.
import _ "github.com/airflow-sandbox/airflow-go-worker/sandbox/modal"

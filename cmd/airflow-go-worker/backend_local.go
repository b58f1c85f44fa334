package main

// The local backend (bubblewrap on the worker) is in every build; the other
// backends and the optional stores are extras chosen when the binary is
// built (extras.go).
import _ "github.com/airflow-sandbox/airflow-go-worker/sandbox/local"

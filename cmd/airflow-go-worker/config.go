package main

import (
	"errors"

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
)

// STUB: replaced when the task catalogue lands.

// loadBundleConfig registers the tasks a YAML bundle config declares.
// source is the config's display name (its file name).
func loadBundleConfig(b *bundles.Bundle, data []byte, source string) error {
	return errors.New("bundle configs are not supported yet")
}

// embeddedBundleConfig returns the bundle config packed into this executable's
// AFBNDL01 source region, or nil data when there is none.
func embeddedBundleConfig() (data []byte, source string, err error) { return nil, "", nil }

// runSweep implements `airflow-go-worker sweep`.
func runSweep(args []string) error { return errors.New("sweep: not implemented yet") }

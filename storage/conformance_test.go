package storage_test

import (
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/testing/storagetest"
)

// TestConformance runs the store suite on file://, the store this package
// holds; every other store runs it from its own package's tests.
func TestConformance(t *testing.T) {
	storagetest.Run(t, storagetest.Target{Name: "file", New: func(t testing.TB) storagetest.Area { a, _ := storagetest.FileArea(t); return a }})
}

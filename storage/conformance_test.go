package storage_test

import (
	"testing"

	_ "github.com/airflow-sandbox/airflow-go-worker/storage/azure"
	_ "github.com/airflow-sandbox/airflow-go-worker/storage/gcs"
	_ "github.com/airflow-sandbox/airflow-go-worker/storage/s3"
	"github.com/airflow-sandbox/airflow-go-worker/storage/storagetest"
	"github.com/airflow-sandbox/airflow-go-worker/testing/azurite"
	"github.com/airflow-sandbox/airflow-go-worker/testing/gcsserver"
	"github.com/airflow-sandbox/airflow-go-worker/testing/s3server"
)

// TestConformance runs the same suite on every store, each on a real
// server started here on 127.0.0.1 (one server per store, a fresh bucket
// per subtest).
func TestConformance(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		storagetest.Run(t, storagetest.Target{Name: "file", New: func(t testing.TB) storagetest.Area { a, _ := storagetest.FileArea(t); return a }})
	})
	t.Run("s3", func(t *testing.T) {
		srv := s3server.Start(t)
		storagetest.Run(t, storagetest.Target{Name: "s3", New: func(t testing.TB) storagetest.Area { return storagetest.S3Area(t, srv) }})
	})
	t.Run("gcs", func(t *testing.T) {
		srv := gcsserver.Start(t)
		storagetest.Run(t, storagetest.Target{Name: "gcs", New: func(t testing.TB) storagetest.Area { return storagetest.GCSArea(t, srv) }})
	})
	t.Run("azure", func(t *testing.T) {
		srv := azurite.Start(t)
		storagetest.Run(t, storagetest.Target{Name: "azure", New: func(t testing.TB) storagetest.Area { return storagetest.AzureArea(t, srv, "abfs") }})
	})
}

package azure_test

import (
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/testing/azurite"
	"github.com/airflow-sandbox/airflow-go-worker/testing/storagetest"
)

// TestConformance runs the store suite on an Azurite started here on
// 127.0.0.1, a fresh container per subtest, named with abfs://.
func TestConformance(t *testing.T) {
	srv := azurite.Start(t)
	storagetest.Run(t, storagetest.Target{Name: "azure", New: func(t testing.TB) storagetest.Area {
		name := storagetest.NewBucketName()
		srv.CreateContainer(t, name)
		return storagetest.Area{
			Connect:       storagetest.Connection(t, "az", srv.Connection("az_test")),
			URL:           func(key string) string { return "abfs://" + name + "/" + key },
			Objects:       func(t testing.TB) []string { return srv.Blobs(t, name) },
			MissingBucket: "abfs://no-such-container/k",
		}
	}})
}

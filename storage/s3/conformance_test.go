package s3_test

import (
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/testing/s3server"
	"github.com/airflow-sandbox/airflow-go-worker/testing/storagetest"
)

// TestConformance runs the store suite on a versitygw started here on
// 127.0.0.1, a fresh bucket per subtest.
func TestConformance(t *testing.T) {
	srv := s3server.Start(t)
	storagetest.Run(t, storagetest.Target{Name: "s3", New: func(t testing.TB) storagetest.Area { return areaOn(t, srv) }})
}

// areaOn is a fresh bucket on srv, reached through an aws connection.
func areaOn(t testing.TB, srv *s3server.Server) storagetest.Area {
	bucket := storagetest.NewBucketName()
	srv.CreateBucket(t, bucket)
	return storagetest.Area{
		Connect:       storagetest.Connection(t, "s3", srv.Connection("s3_test")),
		URL:           func(key string) string { return "s3://" + bucket + "/" + key },
		Objects:       func(t testing.TB) []string { return srv.Keys(t, bucket) },
		Pending:       func(t testing.TB) int { return srv.PendingUploads(t, bucket) },
		MissingBucket: "s3://no-such-bucket/k",
	}
}

package gcs_test

import (
	"slices"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/testing/gcsserver"
	"github.com/airflow-sandbox/airflow-go-worker/testing/storagetest"
)

// TestConformance runs the store suite on a fake-gcs-server started here
// on 127.0.0.1, a fresh bucket per subtest.
func TestConformance(t *testing.T) {
	srv := gcsserver.Start(t)
	storagetest.Run(t, storagetest.Target{Name: "gcs", New: func(t testing.TB) storagetest.Area {
		bucket := storagetest.NewBucketName()
		srv.CreateBucket(t, bucket)
		return storagetest.Area{
			Connect:       storagetest.Connection(t, "gs", srv.Connection("gs_test")),
			URL:           func(key string) string { return "gs://" + bucket + "/" + key },
			Objects:       func(t testing.TB) []string { o := srv.Objects(t, bucket); slices.Sort(o); return o },
			MissingBucket: "gs://no-such-bucket/k",
		}
	}})
}

package bundles

import (
	"context"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
)

// BenchmarkGetConnection measures one GetConnection round trip over a real
// loopback TCP comm socket: encode, frame, supervisor decode and reply,
// routing to the waiter, ConnectionResult decoding.
func BenchmarkGetConnection(b *testing.B) {
	bb := New()
	bb.Register("d", "conn", func(ctx context.Context, c connectionGetter) error {
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := c.GetConnection(ctx, "bench"); err != nil {
				return err
			}
		}
		b.StopTimer()
		return nil
	})
	result := map[string]any{"type": "ConnectionResult", "conn_id": "bench", "conn_type": "http", "host": "example.internal", "port": int64(443), "login": "u", "password": "p", "extra": `{"timeout": 5}`}
	s := runFake(b, bb, startupFrame(b, "d", "conn", nil), func(protocol.Message) (map[string]any, map[string]any) {
		return result, nil
	}, serveConfig{})
	if s.terminal == nil || s.terminal.Type() != "SucceedTask" {
		b.Fatalf("benchmark task failed: %+v %v", s.terminal, s.logEvents())
	}
}

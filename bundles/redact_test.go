package bundles

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
)

// Issue 10, hole 3, in the task runtime: a multi-line secret the task masks
// is kept out of its log records line by line, whether a record carries a
// single line of it, the whole of it, or a piece in a field.
func TestLogSinkMasksEachLineOfAMultiLineSecret(t *testing.T) {
	const key = "-----BEGIN TEST KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSj\nAgEAAoIBAQC7VJTUt9Us8cKjMzEfYyjiWA4R4\n-----END TEST KEY-----"
	b := New()
	b.Register("d", "t", func(ctx context.Context, c Client, log hclog.Logger) error {
		if err := c.MaskSecret(ctx, key, "key"); err != nil {
			return err
		}
		for _, line := range strings.Split(key, "\n") {
			log.Info("line " + line)
		}
		log.Info("whole", "key", key, "piece", "x"+strings.Split(key, "\n")[2]+"y")
		return fmt.Errorf("failed with %s", strings.Split(key, "\n")[1])
	})
	s := runFake(t, b, startupFrame(t, "d", "t", func(sd *protocol.StartupDetails) { sd.ShouldRetry = true }), func(m protocol.Message) (map[string]any, map[string]any) {
		return nil, nil
	}, serveConfig{})
	all := fmt.Sprint(s.logs, s.terminal.Body)
	for _, line := range strings.Split(key, "\n")[1:3] {
		if strings.Contains(all, line[:12]) {
			t.Fatalf("a line of the secret leaked: %s", all)
		}
	}
	if r := s.terminal.Body["retry_reason"]; r != "failed with ***" {
		t.Fatalf("retry_reason %v", r)
	}
}

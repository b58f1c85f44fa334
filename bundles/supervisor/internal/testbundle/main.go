// Command testbundle is a bundle for the supervisor's end-to-end tests: the
// shipped selftest Dag plus tasks that misbehave on purpose.
package main

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/selftest"
)

type echoIn struct {
	Msg   string `json:"msg"`
	Times int    `json:"times"`
}

func main() {
	b := bundles.New()
	selftest.Register(b)
	b.Register("e2e", "panic", func() error { panic("deliberate panic") })
	b.Register("e2e", "echo", func(in echoIn) (map[string]any, error) {
		return map[string]any{"msg": in.Msg, "times": in.Times}, nil
	}, bundles.WithDefaults(map[string]any{"times": 1}), bundles.AllowConf("times"))
	b.Register("e2e", "leak", func(ctx context.Context, c bundles.Client, log hclog.Logger) error {
		if err := c.MaskSecret(ctx, "s3cr3t-value", "demo"); err != nil {
			return err
		}
		log.Info("about to print s3cr3t-value")
		fmt.Println("stdout has s3cr3t-value too")
		return nil
	})
	b.Register("e2e", "print_password", func(ctx context.Context, c bundles.ConnectionGetter) error {
		conn, err := c.GetConnection(ctx, "db")
		if err != nil {
			return err
		}
		fmt.Println("stdout shows", conn.Password)
		return nil
	})
	b.Register("e2e", "stubborn", func(log hclog.Logger) error {
		log.Info("stubborn task started; it ignores cancellation")
		select {}
	})
	bundles.Main(b)
}

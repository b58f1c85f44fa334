// Command plainbundle is the smallest useful bundle: the self-test Dag and
// one plain Go task, importing nothing but package bundles. The start-up
// benchmark measures it as what any bundle of plain Go tasks costs.
package main

import (
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/selftest"
)

type shoutIn struct {
	Text string `json:"text"`
}

func main() {
	b := bundles.New()
	selftest.Register(b)
	b.Register("plain", "shout", func(in shoutIn) (string, error) { return strings.ToUpper(in.Text), nil })
	bundles.Main(b)
}

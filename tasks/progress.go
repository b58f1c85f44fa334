package tasks

import (
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/go-hclog"
)

// ProgressEvery is how often long transfers log their progress.
var ProgressEvery = 5 * time.Second

// progressReader logs bytes moved and the rate every interval, so a long
// transfer shows it is alive in the task log.
type progressReader struct {
	r        io.Reader
	log      hclog.Logger
	what     string
	total    int64 // expected size; <= 0 when unknown
	every    time.Duration
	now      func() time.Time
	start    time.Time
	lastLog  time.Time
	n        int64
	reported bool
}

func newProgressReader(r io.Reader, log hclog.Logger, what string, total int64) *progressReader {
	now := time.Now()
	return &progressReader{r: r, log: log, what: what, total: total, every: ProgressEvery, now: time.Now, start: now, lastLog: now}
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	if t := p.now(); t.Sub(p.lastLog) >= p.every {
		p.lastLog = t
		p.reported = true
		p.log.Info("transfer progress", "what", p.what, "bytes", p.n, "of", p.total,
			"rate", formatRate(p.n, t.Sub(p.start)))
	}
	return n, err
}

// done logs the final figure for transfers long enough to have shown progress.
func (p *progressReader) done() {
	if p.reported {
		p.log.Info("transfer finished", "what", p.what, "bytes", p.n,
			"rate", formatRate(p.n, p.now().Sub(p.start)))
	}
}

func formatRate(n int64, d time.Duration) string {
	if d <= 0 {
		return "n/a"
	}
	return formatBytes(int64(float64(n)/d.Seconds())) + "/s"
}

func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

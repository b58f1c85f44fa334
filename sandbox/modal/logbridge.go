package modal

import (
	"context"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// slogBridge passes the SDK's slog records at WARN and above to hclog, so
// SDK warnings land in the task log and its debug chatter does not.
type slogBridge struct {
	log   hclog.Logger
	attrs []any
}

func newSlogBridge(log hclog.Logger) *slog.Logger {
	return slog.New(&slogBridge{log: log.Named("modal-sdk")})
}

func (b *slogBridge) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (b *slogBridge) Handle(_ context.Context, r slog.Record) error {
	args := append([]any(nil), b.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		args = append(args, a.Key, a.Value.String())
		return true
	})
	if r.Level >= slog.LevelError {
		b.log.Error(r.Message, args...)
	} else {
		b.log.Warn(r.Message, args...)
	}
	return nil
}

func (b *slogBridge) WithAttrs(attrs []slog.Attr) slog.Handler {
	nb := &slogBridge{log: b.log, attrs: append([]any(nil), b.attrs...)}
	for _, a := range attrs {
		nb.attrs = append(nb.attrs, a.Key, a.Value.String())
	}
	return nb
}

func (b *slogBridge) WithGroup(name string) slog.Handler {
	return &slogBridge{log: b.log.Named(name), attrs: b.attrs}
}

package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
)

// ParseTaskHandlers does what a Gen C Dag processor does (spec 3.9): it
// forks the bundle, sends a TaskHandlerParseRequest for file, and returns
// the TaskHandlerParsingResult body the bundle declares.
func (s *Supervisor) ParseTaskHandlers(ctx context.Context, file string) (map[string]any, error) {
	c, err := s.start(ctx, newRedactor(), &shower{w: s.Logs})
	if err != nil {
		return nil, fmt.Errorf("parsing task handlers: %w", err)
	}
	defer c.closeConns()
	go func() { _, _ = io.Copy(io.Discard, c.logs) }() // drained, not read
	p, _ := protocol.EncodeReply(0, &protocol.TaskHandlerParseRequest{File: file, BundlePath: file, BundleName: "local"}, nil)
	if err := protocol.WriteFrame(c.comm, p); err != nil {
		c.kill()
		return nil, fmt.Errorf("sending TaskHandlerParseRequest: %w", err)
	}
	c.comm.SetReadDeadline(time.Now().Add(s.startupTimeout()))
	p, err = protocol.ReadFrame(c.comm)
	if err != nil {
		c.kill()
		return nil, fmt.Errorf("reading the TaskHandlerParsingResult: %w", err)
	}
	m, err := protocol.DecodeMessage(p)
	if err != nil {
		c.kill()
		return nil, err
	}
	if m.Type() != protocol.TypeTaskHandlerParsingResult {
		c.kill()
		return nil, fmt.Errorf("the bundle answered %q, want TaskHandlerParsingResult", m.Type())
	}
	rp, _ := protocol.EncodeReply(m.ID, nil, nil)
	if err := protocol.WriteFrame(c.comm, rp); err != nil && !errors.Is(err, net.ErrClosed) {
		return nil, err
	}
	select {
	case <-c.exited:
	case <-ctx.Done():
		c.kill()
		return nil, ctx.Err()
	}
	if c.exit != 0 {
		return m.Body, fmt.Errorf("the bundle exited with %d after answering", c.exit)
	}
	return m.Body, nil
}

func (s *Supervisor) startupTimeout() time.Duration {
	if s.StartupTimeout > 0 {
		return s.StartupTimeout
	}
	return DefaultStartupTimeout
}

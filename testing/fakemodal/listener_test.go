package fakemodal

import (
	"errors"
	"net"
	"sync"
	"testing"
)

// grpc.Stop closes the listener while grpc's Serve goroutine waits in
// Accept, and the accept loop then records the inner listener's failure.
// Accept must hand back a whole error: the field was unguarded (reported
// under -race), and a torn read crashed grpc in (*net.OpError).Temporary in
// CI.
func TestSniffListenerCloseWhileAccepting(t *testing.T) {
	for i := 0; i < 50; i++ {
		inner, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l, err := newSniffListener(inner)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for j := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[j] = l.Accept()
			}()
		}
		l.Close()
		wg.Wait()
		for _, got := range errs {
			var op *net.OpError
			switch {
			case errors.Is(got, net.ErrClosed):
			case errors.As(got, &op) && op != nil && op.Err != nil:
			default:
				t.Fatalf("Accept after Close = %#v, want net.ErrClosed or the inner *net.OpError", got)
			}
		}
	}
}

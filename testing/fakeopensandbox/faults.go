package fakeopensandbox

import (
	"fmt"
	"net/http"
	"time"
)

// Fault is what an injected call does instead of (or before) being served.
type Fault struct {
	// Status, when set, answers the call with this status and an error
	// body instead of serving it.
	Status int
	// Code and Message make the error body ({code, message}); defaults:
	// GENERAL::UNKNOWN_ERROR and "injected failure of <route>". Give
	// Code "RUNTIME_ERROR" to imitate execd's own 500s.
	Code, Message string
	// Text, when set, is sent as a text/plain body instead of the JSON
	// one, as Gin's 404 ("404 page not found") or a proxy's 502 are.
	Text string
	// Delay holds the call this long before it is answered or served (a
	// slow server); it ends early when the client gives up.
	Delay time.Duration
}

func (f Fault) zero() bool { return f.Status == 0 && f.Delay == 0 }

// Inject makes the nth call of route from now (1 = the next one) do f;
// the calls before it are served normally unless they have faults of
// their own.
func (s *Server) Inject(route string, nth int, f Fault) {
	if nth < 1 {
		panic("fakeopensandbox: Inject needs nth >= 1")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.faults[route]
	for len(q) < nth {
		q = append(q, Fault{})
	}
	q[nth-1] = f
	s.faults[route] = q
}

// FailNext makes the next n calls of route answer HTTP 500.
func (s *Server) FailNext(route string, n int) {
	s.FailNextWith(route, n, http.StatusInternalServerError)
}

// FailNextWith makes the next n calls of route answer status.
func (s *Server) FailNextWith(route string, n, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.faults[route] = append(s.faults[route], Fault{Status: status})
	}
}

// SlowNext holds the next n calls of route for d before serving them.
func (s *Server) SlowNext(route string, n int, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.faults[route] = append(s.faults[route], Fault{Delay: d})
	}
}

// DropNextStream cuts the next command stream after n whole events (init
// and the first ping included, later periodic pings not counted), as a
// broken connection would; the command keeps running.
func (s *Server) DropNextStream(n int) {
	s.mu.Lock()
	s.stream = streamFault{after: n, kind: cutBetween}
	s.mu.Unlock()
}

// DropNextStreamMidEvent cuts the next command stream in the middle of the
// event that follows n whole events: half a JSON object, then nothing.
func (s *Server) DropNextStreamMidEvent(n int) {
	s.mu.Lock()
	s.stream = streamFault{after: n, kind: cutMidEvent}
	s.mu.Unlock()
}

// StallNextStream stops the next command stream after n events without
// closing it: no more events, no pings, the connection left open, as a
// proxy that lost its upstream may do.
func (s *Server) StallNextStream(n int) {
	s.mu.Lock()
	s.stream = streamFault{after: n, kind: stall}
	s.mu.Unlock()
}

// VanishDuringNextCommand removes the sandbox of the next command once the
// command has printed its first line, as an expiry or an operator would.
func (s *Server) VanishDuringNextCommand() {
	s.mu.Lock()
	s.vanish = true
	s.mu.Unlock()
}

// LoseNextCreateAnswer makes the next create succeed on the server but cut
// the connection before answering, as a timeout or a proxy failure would.
func (s *Server) LoseNextCreateAnswer() {
	s.mu.Lock()
	s.loseAns = true
	s.mu.Unlock()
}

// CutNextDownload cuts the next file download after n bytes of body.
func (s *Server) CutNextDownload(n int64) {
	s.mu.Lock()
	s.downFault = downloadFault{after: n, kind: cutBetween}
	s.mu.Unlock()
}

// StallNextDownload sends n bytes of the next download's body, then
// nothing more, keeping the connection open.
func (s *Server) StallNextDownload(n int64) {
	s.mu.Lock()
	s.downFault = downloadFault{after: n, kind: stall}
	s.mu.Unlock()
}

// CutNextUpload drops the connection of the next upload after n bytes of
// its request body were read: the client's request fails, and, as on real
// execd (which parses the whole form before writing anything), no file is
// touched.
func (s *Server) CutNextUpload(n int64) {
	s.mu.Lock()
	s.cutUp = n
	s.mu.Unlock()
}

type faultKind int

const (
	cutBetween faultKind = iota + 1
	cutMidEvent
	stall
)

type streamFault struct {
	after int
	kind  faultKind
}

type downloadFault struct {
	after int64
	kind  faultKind
}

// injected applies a pending fault for route: it reports true when the
// call was answered (an injected status, or a client that left during an
// injected delay).
func (s *Server) injected(route string, w http.ResponseWriter, r *http.Request) bool {
	s.mu.Lock()
	s.calls[route]++
	q := s.faults[route]
	if len(q) == 0 {
		s.mu.Unlock()
		return false
	}
	f := q[0]
	s.faults[route] = q[1:]
	s.mu.Unlock()
	if f.zero() {
		return false
	}
	if f.Delay > 0 {
		t := time.NewTimer(f.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return true
		case <-s.closing:
			return true
		}
	}
	if f.Status == 0 {
		return false
	}
	if f.Text != "" {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(f.Status)
		w.Write([]byte(f.Text))
		return true
	}
	code, msg := f.Code, f.Message
	if code == "" {
		code = "GENERAL::UNKNOWN_ERROR"
	}
	if msg == "" {
		msg = fmt.Sprintf("injected failure of %s", route)
	}
	writeJSON(w, f.Status, apiError{Code: code, Message: msg})
	return true
}

// Calls counts the requests a route has received (injected failures included).
func (s *Server) Calls(route string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[route]
}

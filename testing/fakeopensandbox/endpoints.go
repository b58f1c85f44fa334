package fakeopensandbox

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// Endpoints, as opensandbox-server on Docker hands them out (bridge
// network, ingress mode direct):
//
//   - direct: every sandbox has a host port of its own where execd
//     answers, and every port of the sandbox is reached through execd's
//     /proxy/{port} route: 127.0.0.1:<its port>/proxy/<port>, 44772
//     included. The egress sidecar's port 18080 comes with the
//     OPENSANDBOX-EGRESS-AUTH header. Once the sandbox is gone nothing
//     listens there.
//   - use_server_proxy=true: <server>/sandboxes/<id>/proxy/<port>, under
//     /v1 when the lookup was (the server serves both, without an API key).
//   - a port outside 1-65535: 400 DOCKER::INVALID_PORT.

// openDirect starts the sandbox's own listener.
func (s *Server) openDirect(b *sbx) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("no port for the sandbox's endpoint: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/proxy/{port}/{path...}", func(w http.ResponseWriter, r *http.Request) {
		s.serveInSandbox(w, r, b, r.PathValue("port"), "/"+r.PathValue("path"))
	})
	b.direct = &http.Server{Handler: mux}
	b.directAddr = ln.Addr().String()
	go b.direct.Serve(ln)
	return nil
}

// stopContainer ends what a sandbox's container serves: its endpoint
// stops listening and its command streams break.
func (s *Server) stopContainer(b *sbx) {
	b.stopOnce.Do(func() {
		close(b.gone)
		if b.direct != nil {
			b.direct.Close()
		}
	})
}

func (s *Server) handleEndpoint(w http.ResponseWriter, r *http.Request) {
	if s.injected(RouteEndpoint, w, r) {
		return
	}
	id := r.PathValue("id")
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil {
		validation(w, []string{"port"}, "Input should be a valid integer")
		return
	}
	if port < 1 || port > 65535 {
		writeJSON(w, http.StatusBadRequest, apiError{Code: "DOCKER::INVALID_PORT", Message: "Port must be between 1 and 65535."})
		return
	}
	s.mu.Lock()
	b, ok := s.sandboxes[id]
	s.mu.Unlock()
	if !ok {
		notFound(w, id)
		return
	}
	headers := map[string]string{}
	ep := fmt.Sprintf("%s/proxy/%d", b.directAddr, port)
	if v := r.URL.Query().Get("use_server_proxy"); v == "true" || v == "True" || v == "1" {
		prefix, _, _ := strings.Cut(r.URL.Path, "/sandboxes/")
		ep = fmt.Sprintf("%s%s/sandboxes/%s/proxy/%d", s.Domain, prefix, id, port)
	}
	if port == EgressPort {
		headers[EgressAuthHeader] = b.egressToken
	}
	if port == ExecdPort && s.opts.ExecdToken != "" {
		headers[ExecdTokenHeader] = s.opts.ExecdToken
	}
	resp := map[string]any{"endpoint": ep}
	if len(headers) > 0 {
		resp["headers"] = headers
	}
	writeJSON(w, http.StatusOK, resp)
}

// handleProxy is the server's proxy route.
func (s *Server) handleProxy(w http.ResponseWriter, r *http.Request) {
	b, ok := s.lookup(r.PathValue("id"))
	if !ok {
		notFound(w, r.PathValue("id"))
		return
	}
	s.serveInSandbox(w, r, b, r.PathValue("port"), "/"+r.PathValue("path"))
}

// serveInSandbox serves a request to port inside sandbox b, sub being the
// path below the endpoint: execd, or the egress sidecar.
func (s *Server) serveInSandbox(w http.ResponseWriter, r *http.Request, b *sbx, port, sub string) {
	s.mu.Lock()
	state := s.state(b)
	real := b.real
	s.mu.Unlock()
	if state != "Running" {
		http.Error(w, "Bad Gateway", http.StatusBadGateway)
		return
	}
	switch port {
	case strconv.Itoa(ExecdPort):
		if real != nil {
			real.serve(w, r, sub, s.spool)
			return
		}
		s.serveExecd(w, r, b, sub)
	case strconv.Itoa(EgressPort):
		s.serveEgress(w, r, b, sub)
	default:
		http.Error(w, "Bad Gateway", http.StatusBadGateway)
	}
}

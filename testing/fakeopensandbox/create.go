package fakeopensandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// handleCreate is POST /sandboxes: check the body as FastAPI and the
// server do, refuse what the server would (an image it has not got, a
// timeout over its cap, a policy the backing driver cannot enforce), make
// the backing sandbox, and answer 202 once it exists (after
// Options.CreateLatency, as the real server answers only once its
// containers are up).
func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request) {
	if s.injected(RouteCreate, w, r) {
		return
	}
	body, raw, ok := s.decodeCreate(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	s.creates = append(s.creates, raw)
	ignore := s.ignorePol
	s.mu.Unlock()
	if !s.serverAccepts(w, body) {
		return
	}
	block, refusal := s.backingNetwork(body.NetworkPolicy, ignore)
	if refusal != "" {
		writeJSON(w, http.StatusBadRequest, apiError{Code: "SANDBOX::INVALID_PARAMETER", Message: refusal})
		return
	}
	if !s.waitCreateLatency(r) {
		return
	}
	b, ok := s.provision(w, r, body, block)
	if !ok {
		return
	}
	s.mu.Lock()
	s.sandboxes[b.id] = b
	resp := s.record(b)
	delete(resp, "image") // the real create answer has none
	lose := s.loseAns
	s.loseAns = false
	s.mu.Unlock()
	if lose {
		panic(http.ErrAbortHandler)
	}
	writeJSON(w, http.StatusAccepted, resp)
}

// decodeCreate reads and checks a create body; false when it answered.
func (s *Server) decodeCreate(w http.ResponseWriter, r *http.Request) (createBody, []byte, bool) {
	var body createBody
	raw, err := readBody(r)
	if err != nil {
		validation(w, nil, err.Error())
		return body, nil, false
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		jsonInvalid(w, "JSON decode error")
		return body, nil, false
	}
	switch {
	case body.Image == nil || body.Image.URI == "":
		validation(w, []string{"image", "uri"}, "Field required")
	case len(body.Entrypoint) == 0:
		validation(w, []string{"entrypoint"}, "entrypoint is required when image is given")
	case body.ResourceLimits == nil:
		validation(w, []string{"resourceLimits"}, "resourceLimits is required")
	case body.Timeout != nil && *body.Timeout < 60:
		validation(w, []string{"timeout"}, "Input should be greater than or equal to 60")
	default:
		return body, raw, checkPolicy(w, body)
	}
	return body, nil, false
}

// checkPolicy checks the metadata labels and the policy's shape.
func checkPolicy(w http.ResponseWriter, body createBody) bool {
	if msg := checkMetadata(ptrs(body.Metadata)); msg != "" {
		writeJSON(w, http.StatusBadRequest, apiError{Code: "SANDBOX::INVALID_METADATA_LABEL", Message: msg})
		return false
	}
	p := body.NetworkPolicy
	if p == nil {
		return true
	}
	if p.DefaultAction != "" && p.DefaultAction != "allow" && p.DefaultAction != "deny" {
		validation(w, []string{"networkPolicy", "defaultAction"}, "Input should be 'allow' or 'deny'")
		return false
	}
	for i, rule := range p.Egress {
		if rule.Action != "allow" && rule.Action != "deny" || rule.Target == "" {
			validation(w, []string{"networkPolicy", "egress", strconv.Itoa(i)}, "rule needs action allow|deny and a target")
			return false
		}
	}
	return true
}

// serverAccepts answers what opensandbox-server refuses before it makes
// a container: a timeout over max_sandbox_timeout_seconds (400) and an
// image its Docker host has not got and cannot pull (500, the pull's
// error); false when it answered.
func (s *Server) serverAccepts(w http.ResponseWriter, body createBody) bool {
	if limit := int64(s.opts.MaxTimeout / time.Second); limit > 0 && body.Timeout != nil && *body.Timeout > limit {
		writeJSON(w, http.StatusBadRequest, apiError{Code: "SANDBOX::INVALID_PARAMETER",
			Message: fmt.Sprintf("Sandbox timeout %ds exceeds configured maximum of %ds.", *body.Timeout, limit)})
		return false
	}
	if s.opts.Images != nil && !slices.Contains(s.opts.Images, body.Image.URI) {
		writeJSON(w, http.StatusInternalServerError, apiError{Code: "DOCKER::SANDBOX_IMAGE_PULL_FAILED", Message: pullFailure(body.Image.URI)})
		return false
	}
	return true
}

// pullFailure is the server's message for an image Docker could not pull
// (recorded from opensandbox-server 1.1.1 on Docker 20.10 without a
// registry).
func pullFailure(image string) string {
	return fmt.Sprintf(`Failed to pull image %s: 500 Server Error for http+docker://localhost/v1.41/images/create?fromImage=%s: Internal Server Error ("Get "https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io: no such host")`, image, image)
}

// waitCreateLatency holds the answer for Options.CreateLatency; false
// when the client left first.
func (s *Server) waitCreateLatency(r *http.Request) bool {
	if s.opts.CreateLatency <= 0 {
		return true
	}
	t := time.NewTimer(s.opts.CreateLatency)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

// provision makes the backing sandbox and its record; false when it
// answered an error.
func (s *Server) provision(w http.ResponseWriter, r *http.Request, body createBody, block bool) (*sbx, bool) {
	id := randHex(16)
	now := time.Now().UTC()
	spec := sandbox.Spec{Env: body.Env, Workdir: s.opts.Workdir, Lifetime: sandbox.MaxLifetime, Network: sandbox.NetworkPolicy{Open: !block}}
	if body.Timeout != nil && time.Duration(*body.Timeout)*time.Second+time.Minute < sandbox.MaxLifetime {
		spec.Lifetime = time.Duration(*body.Timeout)*time.Second + time.Minute
	}
	if _, err := s.drv.Create(r.Context(), id, spec); err != nil {
		if errors.Is(err, sandbox.ErrRefused) {
			// The backing driver cannot give what was asked (the network
			// policy among it): refuse rather than run it weaker.
			writeJSON(w, http.StatusBadRequest, apiError{Code: "SANDBOX::INVALID_PARAMETER", Message: "the sandbox cannot be provided as requested: " + err.Error()})
			return nil, false
		}
		writeJSON(w, http.StatusInternalServerError, apiError{Code: "DOCKER::SANDBOX_START_FAILED", Message: err.Error()})
		return nil, false
	}
	s.mu.Lock()
	pending := s.pending
	s.mu.Unlock()
	b := &sbx{
		id: id, image: body.Image.URI, entrypoint: body.Entrypoint, metadata: body.Metadata,
		policy: body.NetworkPolicy, createdAt: now, readyAt: now.Add(pending),
		egressToken: randHex(8), gone: make(chan struct{}), cmds: map[string]*command{},
	}
	if b.metadata == nil {
		b.metadata = map[string]string{}
	}
	if err := s.openDirect(b); err != nil {
		s.destroyBacking(id)
		writeJSON(w, http.StatusInternalServerError, apiError{Code: "DOCKER::SANDBOX_START_FAILED", Message: err.Error()})
		return nil, false
	}
	if s.opts.ExecdBinary != "" {
		b.starting = true // Pending until the real execd answers
		go s.startReal(b, block, body.Env)
	}
	if body.Timeout != nil {
		life := time.Duration(*body.Timeout) * time.Second
		if s.opts.Lifetime > 0 {
			life = s.opts.Lifetime
		}
		b.expiresAt = now.Add(life)
		b.timer = time.AfterFunc(time.Until(b.expiresAt), func() { s.expire(id) })
	}
	return b, true
}

// expire ends a sandbox at its lifetime as the real server does: its
// container stops first, so for Options.ExpiredFor the record says Failed
// (CONTAINER_EXITED_ERROR), then it is gone (404).
func (s *Server) expire(id string) {
	if s.opts.ExpiredFor < 0 {
		s.remove(id)
		return
	}
	s.mu.Lock()
	b, ok := s.sandboxes[id]
	if ok {
		b.forced = &status{State: "Failed", Reason: "CONTAINER_EXITED_ERROR", Message: "Sandbox container exited with code 137."}
	}
	s.mu.Unlock()
	if !ok {
		return
	}
	s.stopContainer(b)
	time.AfterFunc(s.opts.ExpiredFor, func() { s.remove(id) })
}

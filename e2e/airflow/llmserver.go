package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// llmServer is a scripted model behind an OpenAI-compatible chat-completions
// endpoint (POST /v1/chat/completions) on 127.0.0.1, in this process: what
// the agent's LLM connection points at instead of a real provider. It
// answers every request from a script (a function of the conversation so
// far), or, while failing, with HTTP 500 as a provider in an outage does.
// It is strict: a request on another path, with another key or model, a
// streamed one, or one the script cannot answer is refused with HTTP 400
// and recorded, and the run fails on it.
type llmServer struct {
	url    string // base URL, ending in /v1: the connection's host
	apiKey string // the connection's password; every request must bear it
	model  string // the model name the connection's extra names (after "openai-chat:")
	script func(*chatRequest) (chatTurn, error)
	srv    *http.Server

	mu        sync.Mutex
	label     string // the Dag run being served (set by serve)
	failing   bool   // answer every request with HTTP 500
	exchanges []llmExchange
	refused   []string // requests refused, with why
}

// llmExchange is one request answered, for the checks.
type llmExchange struct {
	label  string // the run being served when it came
	status int    // the HTTP status answered
	turn   chatTurn
}

// chatTurn is one model answer: a tool call, or (no tool) the final text.
type chatTurn struct {
	step int // how many tool results the conversation held
	tool string
	args map[string]any
	text string
}

// chatRequest is the part of a chat-completions request the script reads.
type chatRequest struct {
	Model    string        `json:"model"`
	Messages []chatMessage `json:"messages"`
	Tools    []struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
	Stream bool `json:"stream"`
}

type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"` // a string, or a list of {type, text} parts
	ToolCallID string          `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// text is the message's content as plain text, however it was sent.
func (m chatMessage) text() string {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var parts []struct{ Text string }
	_ = json.Unmarshal(m.Content, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// toolNames are the function tools the request offers.
func (r *chatRequest) toolNames() []string {
	var names []string
	for _, t := range r.Tools {
		names = append(names, t.Function.Name)
	}
	return names
}

// toolReturns are the tool results in the conversation, in order.
func (r *chatRequest) toolReturns() []chatMessage {
	var out []chatMessage
	for _, m := range r.Messages {
		if m.Role == "tool" {
			out = append(out, m)
		}
	}
	return out
}

// startLLM serves script on 127.0.0.1 with a fresh API key.
func startLLM(model string, script func(*chatRequest) (chatTurn, error)) (*llmServer, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("starting the scripted model server: %w", err)
	}
	l := &llmServer{url: "http://" + lis.Addr().String() + "/v1", apiKey: "sk-e2e-" + randomHex(12), model: model, script: script}
	mux := http.NewServeMux()
	mux.HandleFunc("/", l.handle)
	l.srv = &http.Server{Handler: mux, ReadHeaderTimeout: time.Minute}
	go l.srv.Serve(lis) //nolint:errcheck // returns when stopped
	return l, nil
}

// serve says which Dag run the next requests belong to, and whether the
// model is down for it. The runs are triggered one after the other, so
// every request until the next call is that run's.
func (l *llmServer) serve(label string, failing bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.label, l.failing = label, failing
}

// exchangesOf lists the requests answered while serving label.
func (l *llmServer) exchangesOf(label string) []llmExchange {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []llmExchange
	for _, e := range l.exchanges {
		if e.label == label {
			out = append(out, e)
		}
	}
	return out
}

// connection is the LLM connection as Airflow reads it from AIRFLOW_CONN_*:
// type pydanticai (common.ai's PydanticAIHook), the key as its password,
// the server's /v1 URL as its host, and the model in its extra. The
// openai-chat prefix picks pydantic-ai's chat-completions client (the
// openai package), which sends the key and talks to host.
func (l *llmServer) connection() string {
	b, _ := json.Marshal(map[string]any{
		"conn_type": "pydanticai", "host": l.url, "password": l.apiKey,
		"extra": map[string]string{"model": "openai-chat:" + l.model},
	})
	return string(b)
}

// stop stops the server and fails when it refused a request: the agent
// then spoke to it in a way the scripted run did not expect.
func (l *llmServer) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = l.srv.Shutdown(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	info("scripted model server stopped; it answered %d requests", len(l.exchanges))
	if len(l.refused) > 0 {
		return fmt.Errorf("the scripted model server refused %d requests:\n      %s", len(l.refused), strings.Join(l.refused, "\n      "))
	}
	return nil
}

func (l *llmServer) handle(w http.ResponseWriter, req *http.Request) {
	l.mu.Lock()
	label, failing := l.label, l.failing
	l.mu.Unlock()
	ex := llmExchange{label: label, status: http.StatusInternalServerError}
	cr, err := l.read(req)
	if err == nil && !failing {
		ex.status = http.StatusOK
		ex.turn, err = l.script(cr)
		ex.turn.step = len(cr.toolReturns())
	}
	l.mu.Lock()
	if err != nil {
		l.refused = append(l.refused, fmt.Sprintf("%s %s (while serving %s): %v", req.Method, req.URL.Path, label, err))
	} else {
		l.exchanges = append(l.exchanges, ex)
	}
	l.mu.Unlock()
	switch {
	case err != nil:
		writeJSON(w, http.StatusBadRequest, apiError("invalid_request_error", err.Error()))
	case failing:
		writeJSON(w, ex.status, apiError("server_error", "scripted outage: the model is unavailable"))
	default:
		writeJSON(w, ex.status, l.completion(ex.turn))
	}
}

// read checks that the request is one the agent's model client should
// send, and decodes it.
func (l *llmServer) read(req *http.Request) (*chatRequest, error) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/chat/completions" {
		return nil, errors.New("only POST /v1/chat/completions is served")
	}
	if req.Header.Get("Authorization") != "Bearer "+l.apiKey {
		return nil, errors.New("the request does not bear the connection's API key")
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 8<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the request: %w", err)
	}
	var cr chatRequest
	if err := json.Unmarshal(body, &cr); err != nil {
		return nil, fmt.Errorf("the request is not a chat-completions request: %w", err)
	}
	if cr.Model != l.model {
		return nil, fmt.Errorf("model %q, want %q (the connection's extra)", cr.Model, l.model)
	}
	if cr.Stream {
		return nil, errors.New("a streamed completion was asked for; the script answers whole ones")
	}
	// Every tool result must answer a call this server made, in order:
	// call_0, call_1, ... (see completion).
	for i, m := range cr.toolReturns() {
		if want := fmt.Sprintf("call_%d", i); m.ToolCallID != want {
			return nil, fmt.Errorf("tool result %d answers call %q, want %q", i, m.ToolCallID, want)
		}
	}
	return &cr, nil
}

// completion is a chat.completion object holding turn. A tool call's id
// says which step of the conversation it is.
func (l *llmServer) completion(turn chatTurn) map[string]any {
	msg := map[string]any{"role": "assistant", "content": nil}
	finish := "stop"
	if turn.tool != "" {
		args, _ := json.Marshal(turn.args)
		msg["tool_calls"] = []map[string]any{{
			"id": fmt.Sprintf("call_%d", turn.step), "type": "function",
			"function": map[string]any{"name": turn.tool, "arguments": string(args)},
		}}
		finish = "tool_calls"
	} else {
		msg["content"] = turn.text
	}
	return map[string]any{
		"id": "chatcmpl-" + randomHex(8), "object": "chat.completion", "created": time.Now().Unix(), "model": l.model,
		"choices": []map[string]any{{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]int{"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
	}
}

func apiError(kind, message string) map[string]any {
	return map[string]any{"error": map[string]any{"message": message, "type": kind, "code": nil}}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// chatClient posts chat-completions requests the way the openai client
// does, building the conversation up as the agent would.
type chatClient struct {
	t        *testing.T
	l        *llmServer
	key      string
	model    string
	tools    []string
	messages []map[string]any
}

func newChatClient(t *testing.T) (*llmServer, *chatClient) {
	t.Helper()
	l, err := startLLM(agentModel, agentRun)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.stop() })
	c := &chatClient{t: t, l: l, key: l.apiKey, model: agentModel, tools: sandboxTools,
		messages: []map[string]any{{"role": "user", "content": "Find the three largest customers."}}}
	return l, c
}

// post sends the conversation; it returns the status and the decoded answer.
func (c *chatClient) post(extra map[string]any) (int, map[string]any) {
	c.t.Helper()
	var tools []map[string]any
	for _, name := range c.tools {
		tools = append(tools, map[string]any{"type": "function", "function": map[string]any{"name": name, "parameters": map[string]any{}}})
	}
	body := map[string]any{"model": c.model, "messages": c.messages, "tools": tools}
	for k, v := range extra {
		body[k] = v
	}
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, c.l.url+"/chat/completions", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		c.t.Fatalf("the answer is not JSON: %v: %s", err, data)
	}
	return resp.StatusCode, out
}

// call is the tool call an answer makes: its id, tool and arguments.
func call(t *testing.T, answer map[string]any) (id, tool string, args map[string]any) {
	t.Helper()
	msg := answer["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	calls, _ := msg["tool_calls"].([]any)
	if len(calls) != 1 {
		t.Fatalf("the answer makes %d tool calls, want 1: %v", len(calls), answer)
	}
	c := calls[0].(map[string]any)
	fn := c["function"].(map[string]any)
	if err := json.Unmarshal([]byte(fn["arguments"].(string)), &args); err != nil {
		t.Fatalf("arguments %q: %v", fn["arguments"], err)
	}
	return c["id"].(string), fn["name"].(string), args
}

// answerTool appends the model's call and the tool's result to the conversation.
func (c *chatClient) answerTool(id, tool string, args map[string]any, result string) {
	a, _ := json.Marshal(args)
	c.messages = append(c.messages,
		map[string]any{"role": "assistant", "tool_calls": []map[string]any{{"id": id, "type": "function", "function": map[string]any{"name": tool, "arguments": string(a)}}}},
		map[string]any{"role": "tool", "tool_call_id": id, "content": result})
}

func TestLLMServerPlaysTheAgent(t *testing.T) {
	l, c := newChatClient(t)
	l.serve("run1", false)
	top := "umbrella 999.99\ninitech 399.05\nhooli 250.00\n"
	wantReport := report([]customerTotal{{"umbrella", "999.99"}, {"initech", "399.05"}, {"hooli", "250.00"}})
	steps := []struct {
		tool   string
		args   map[string]any
		result string
	}{
		{"run_command", map[string]any{"command": topCommand}, "[stdout]\n" + top},
		{"write_file", map[string]any{"path": "report.md", "content": wantReport}, "Wrote 1 bytes to 'report.md'."},
		{"read_file", map[string]any{"path": "report.md"}, strings.TrimSuffix(wantReport, "\n")},
		{"list_directory", map[string]any{"path": "."}, "orders.csv\nreport.md"},
	}
	for i, s := range steps {
		code, answer := c.post(nil)
		if code != http.StatusOK {
			t.Fatalf("step %d: HTTP %d: %v", i, code, answer)
		}
		id, tool, args := call(t, answer)
		if id != fmt.Sprintf("call_%d", i) || tool != s.tool || fmt.Sprint(args) != fmt.Sprint(s.args) {
			t.Fatalf("step %d: the model called %s %s%v, want call_%d %s%v", i, id, tool, args, i, s.tool, s.args)
		}
		c.answerTool(id, tool, args, s.result)
	}
	code, answer := c.post(nil)
	msg := answer["choices"].([]any)[0].(map[string]any)
	if want := "report.md is written: the largest customers are umbrella, initech, hooli."; code != http.StatusOK ||
		msg["finish_reason"] != "stop" || msg["message"].(map[string]any)["content"] != want {
		t.Fatalf("final answer: HTTP %d %v, want the text %q", code, answer, want)
	}
	if n := len(l.exchangesOf("run1")); n != 5 {
		t.Fatalf("%d exchanges recorded for run1, want 5", n)
	}
	if err := l.stop(); err != nil {
		t.Fatalf("stop after a clean conversation: %v", err)
	}
}

func TestLLMServerOutage(t *testing.T) {
	l, c := newChatClient(t)
	l.serve("down", true)
	code, answer := c.post(nil)
	if code != http.StatusInternalServerError || !strings.Contains(fmt.Sprint(answer["error"]), "scripted outage") {
		t.Fatalf("HTTP %d %v, want 500 with the outage error", code, answer)
	}
	ex := l.exchangesOf("down")
	if len(ex) != 1 || ex[0].status != http.StatusInternalServerError || len(l.exchangesOf("run1")) != 0 {
		t.Fatalf("exchanges %+v, want one 500 for the run served", ex)
	}
}

// Whatever the scripted run does not expect is refused with HTTP 400 and
// makes stop fail, so the e2e run fails on it.
func TestLLMServerRefuses(t *testing.T) {
	for name, tc := range map[string]func(c *chatClient) map[string]any{
		"another key":    func(c *chatClient) map[string]any { c.key = "sk-wrong"; return nil },
		"another model":  func(c *chatClient) map[string]any { c.model = "gpt-5"; return nil },
		"streamed":       func(c *chatClient) map[string]any { return map[string]any{"stream": true} },
		"a tool missing": func(c *chatClient) map[string]any { c.tools = c.tools[:3]; return nil },
		"a call not made": func(c *chatClient) map[string]any {
			c.answerTool("call_7", "run_command", nil, "[stdout]\n")
			return nil
		},
		"unusable output": func(c *chatClient) map[string]any {
			c.answerTool("call_0", "run_command", nil, "[stderr]\nawk: no")
			return nil
		},
		"a wrong readback": func(c *chatClient) map[string]any { return wrongReadback(c) },
	} {
		t.Run(name, func(t *testing.T) {
			l, c := newChatClient(t)
			code, answer := c.post(tc(c))
			if code != http.StatusBadRequest {
				t.Fatalf("HTTP %d %v, want 400", code, answer)
			}
			if err := l.stop(); err == nil || !strings.Contains(err.Error(), "refused 1 request") {
				t.Fatalf("stop: %v, want it to report the refused request", err)
			}
		})
	}
}

// wrongReadback is a conversation whose read_file returned something
// other than the report the model wrote.
func wrongReadback(c *chatClient) map[string]any {
	c.answerTool("call_0", "run_command", nil, "[stdout]\numbrella 999.99\ninitech 399.05\nhooli 250.00\n")
	c.answerTool("call_1", "write_file", nil, "Wrote it.")
	c.answerTool("call_2", "read_file", nil, "something else")
	return nil
}

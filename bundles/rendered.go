package bundles

import (
	"context"
	"encoding/json"
	"reflect"
	"regexp"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
	"github.com/airflow-sandbox/airflow-go-worker/redact"
)

// maskedValue replaces what the rendered fields must not show.
const maskedValue = "***"

// reportInputs shows what the task resolved before its body runs: the
// rendered map index (WithMapIndexTemplate) and the bound inputs as
// rendered fields (the UI's rendered-template view), masked with every
// secret the task knows by then: the connections its input declares
// (connectionUser) are read first for that. Neither can fail the task:
// both only describe it; when a declared connection cannot be read, both
// are left out rather than sent with its secrets unmasked.
func (t *task) reportInputs(ctx context.Context, st *runState, input reflect.Value, sources map[string]string, log hclog.Logger, cl *client) error {
	if err := cl.resolveDeclared(ctx, input); err != nil {
		log.Warn("not reporting the rendered fields and map index: a connection the task's input names could not be read, so its secrets could not be masked", "error", err.Error())
		return nil
	}
	values := inputValues(input)
	render := func() map[string]any { return renderedFields(values, sources, cl) }
	fields := render()
	if t.mapIndexTemplate != "" {
		// From the masked values, so a secret's name, a URL's credentials
		// and a known secret are hidden as in the rendered fields.
		name, err := t.renderMapIndex(t.mapIndexTemplate, fields)
		if err == nil {
			err = st.setMapIndex(ctx, cl.secrets.String(name))
		}
		if err != nil {
			log.Warn("could not set the rendered map index", "error", err.Error())
		}
	}
	st.report = &renderedReport{render: render, sent: fields}
	if err := st.rpc.notify(&protocol.SetRenderedFields{RenderedFields: fields}); err != nil {
		log.Warn("could not report the resolved inputs as rendered fields", "error", err.Error())
	}
	return nil
}

// renderedReport is what reportInputs sent, and how to render it again.
type renderedReport struct {
	render func() map[string]any
	sent   map[string]any
}

// finishReport sends the rendered fields again when secrets the task
// learned while it ran (a connection it read, a variable) change what
// they show, so what Airflow keeps of this try shows them masked. It runs
// before the terminal frame, on success and on failure.
func (st *runState) finishReport(log hclog.Logger) {
	if st == nil || st.report == nil {
		return
	}
	fields := st.report.render()
	if reflect.DeepEqual(fields, st.report.sent) {
		return
	}
	st.report.sent = fields
	if err := st.rpc.notify(&protocol.SetRenderedFields{RenderedFields: fields}); err != nil {
		log.Warn("could not report the rendered fields again with the secrets the task learned", "error", err.Error())
	}
}

// maskedMapIndex is the rendered map index masked with every secret known
// now, for the terminal frame: the task may have learned more since it was
// set.
func maskedMapIndex(st *runState, mask func(string) string) *string {
	name := st.renderedMapIndex()
	if name == nil {
		return nil
	}
	masked := mask(*name)
	return &masked
}

// inputValues is the bound input struct as JSON values, by field name.
func inputValues(input reflect.Value) map[string]any {
	v, err := toJSONValue(input.Interface())
	if err != nil {
		return map[string]any{}
	}
	m, _ := v.(map[string]any)
	return m
}

// renderedFields is what SetRenderedFields carries: each input, masked
// (known secrets, URL credentials and query values, and values under
// names that look secret, as Airflow's masker hides them), and
// protocol.SourcesField.
func renderedFields(values map[string]any, sources map[string]string, cl *client) map[string]any {
	out := make(map[string]any, len(values)+1)
	for k, v := range values {
		out[k] = cl.maskValue(k, v)
	}
	src := map[string]any{}
	for k, s := range sources {
		src[k] = s
	}
	out[protocol.SourcesField] = src
	return out
}

func (c *client) maskValue(key string, v any) any {
	if c.names.Sensitive(key) && v != nil && v != "" {
		return maskedValue
	}
	switch x := v.(type) {
	case string:
		return c.maskText(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = c.maskValue(k, e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = c.maskValue("", e)
		}
		return out
	}
	// Numbers and booleans: masked only when a secret's text matches.
	data, _ := json.Marshal(v)
	if s := string(data); c.secrets.String(s) != s {
		return maskedValue
	}
	return v
}

// urlPattern finds the URLs inside a value ("s3://k:s@bucket/x", or one
// inside a command line), so only they lose their credentials and
// query values: redact.URL on a whole string that is not a URL would
// garble it ("echo hi" shows as "echo hi/***").
var urlPattern = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>]+`)

func redactURLs(s string) string {
	return urlPattern.ReplaceAllStringFunc(s, redact.URL)
}

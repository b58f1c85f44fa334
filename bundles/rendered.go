package bundles

import (
	"context"
	"encoding/json"
	"reflect"
	"regexp"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
	"github.com/airflow-sandbox/airflow-go-worker/redact"
)

// maskedValue replaces what the rendered fields must not show.
const maskedValue = "***"

// reportInputs shows what the task resolved before its body runs: the
// rendered map index (WithMapIndexTemplate) and the bound inputs as
// rendered fields (the UI's rendered-template view), masked. Neither can
// fail the task: both only describe it.
func (t *task) reportInputs(ctx context.Context, st *runState, input reflect.Value, sources map[string]string, log hclog.Logger, mask func(string) string) error {
	values := inputValues(input)
	if t.mapIndexTemplate != "" {
		name, err := t.renderMapIndex(t.mapIndexTemplate, values)
		if err == nil {
			name = mask(name)
			err = st.setMapIndex(ctx, name)
		}
		if err != nil {
			log.Warn("could not set the rendered map index", "error", err.Error())
		}
	}
	fields := renderedFields(values, sources, mask)
	if err := st.rpc.notify(&protocol.SetRenderedFields{RenderedFields: fields}); err != nil {
		log.Warn("could not report the resolved inputs as rendered fields", "error", err.Error())
	}
	return nil
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
// (known secrets, URL credentials, and values under names that look
// secret, as Airflow's masker hides them), and protocol.SourcesField.
func renderedFields(values map[string]any, sources map[string]string, mask func(string) string) map[string]any {
	out := make(map[string]any, len(values)+1)
	for k, v := range values {
		out[k] = maskValue(k, v, mask)
	}
	src := map[string]any{}
	for k, s := range sources {
		src[k] = s
	}
	out[protocol.SourcesField] = src
	return out
}

func maskValue(key string, v any, mask func(string) string) any {
	if sensitiveName(key) && v != nil && v != "" {
		return maskedValue
	}
	switch x := v.(type) {
	case string:
		return mask(redactURLs(x))
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = maskValue(k, e, mask)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = maskValue("", e, mask)
		}
		return out
	}
	// Numbers and booleans: masked only when a secret's text matches.
	data, _ := json.Marshal(v)
	if s := string(data); mask(s) != s {
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

// sensitiveNames are the name fragments Airflow's secrets masker hides
// the values of (DEFAULT_SENSITIVE_FIELDS).
var sensitiveNames = []string{"access_token", "api_key", "apikey", "authorization", "passphrase", "passwd", "password", "private_key", "secret", "token", "keyfile_dict", "service_account"}

func sensitiveName(key string) bool {
	k := strings.ToLower(key)
	for _, s := range sensitiveNames {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

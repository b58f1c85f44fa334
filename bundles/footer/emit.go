package footer

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// A small deterministic YAML emitter. yaml.v3's encoder chooses quoting by
// YAML 1.2 rules, but Airflow reads manifests with PyYAML (YAML 1.1), where
// yes/on/off and dates are not strings; emitting ourselves keeps every string
// double-quoted and every key order sorted, byte for byte reproducible.

// plainKey reports whether PyYAML reads k back as the same string unquoted:
// a letter or '_', then letters, digits, '_', '.' or '-'. (A loop, not a
// package-level regexp, which every bundle would compile at start-up.)
func plainKey(k string) bool {
	for i := 0; i < len(k); i++ {
		c := k[i]
		letter := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_'
		if !letter && (i == 0 || !('0' <= c && c <= '9' || c == '.' || c == '-')) {
			return false
		}
	}
	return k != ""
}

// yaml11Words are plain scalars PyYAML resolves to bool or null.
var yaml11Words = map[string]bool{
	"yes": true, "no": true, "on": true, "off": true, "true": true, "false": true, "null": true,
}

func emitKey(k string) string {
	if plainKey(k) && !yaml11Words[strings.ToLower(k)] {
		return k
	}
	return quote(k)
}

// quote double-quotes s. JSON string escapes are a subset of YAML's
// double-quoted escapes, so a JSON-encoded string is valid YAML.
func quote(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // encoding a string cannot fail
	return strings.TrimSuffix(b.String(), "\n")
}

func emitMap(b *strings.Builder, m map[string]any, indent int) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.WriteString(strings.Repeat(" ", indent))
		b.WriteString(emitKey(k))
		b.WriteByte(':')
		if err := emitValue(b, m[k], indent); err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
	}
	return nil
}

// emitValue writes v after a "key:" or "-" that is already on the line.
func emitValue(b *strings.Builder, v any, indent int) error {
	if m, ok := asMap(v); ok {
		if len(m) == 0 {
			b.WriteString(" {}\n")
			return nil
		}
		b.WriteByte('\n')
		return emitMap(b, m, indent+2)
	}
	if l, ok := asList(v); ok {
		if len(l) == 0 {
			b.WriteString(" []\n")
			return nil
		}
		b.WriteByte('\n')
		return emitList(b, l, indent+2)
	}
	s, err := scalar(v)
	if err != nil {
		return err
	}
	b.WriteByte(' ')
	b.WriteString(s)
	b.WriteByte('\n')
	return nil
}

func emitList(b *strings.Builder, l []any, indent int) error {
	pad := strings.Repeat(" ", indent)
	for i, item := range l {
		if m, ok := asMap(item); ok && len(m) > 0 {
			// The first key goes on the dash line: "- key: v", the rest
			// align under it.
			var sub strings.Builder
			if err := emitMap(&sub, m, indent+2); err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
			b.WriteString(pad)
			b.WriteString("- ")
			b.WriteString(sub.String()[indent+2:])
			continue
		}
		b.WriteString(pad)
		b.WriteByte('-')
		if err := emitValue(b, item, indent); err != nil {
			return fmt.Errorf("[%d]: %w", i, err)
		}
	}
	return nil
}

func asMap(v any) (map[string]any, bool) {
	if m, ok := v.(map[string]any); ok {
		return m, true
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Map || rv.Type().Key().Kind() != reflect.String {
		return nil, false
	}
	out := make(map[string]any, rv.Len())
	it := rv.MapRange()
	for it.Next() {
		out[it.Key().String()] = it.Value().Interface()
	}
	return out, true
}

func asList(v any) ([]any, bool) {
	if l, ok := v.([]any); ok {
		return l, true
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
		return nil, false
	}
	out := make([]any, rv.Len())
	for i := range out {
		out[i] = rv.Index(i).Interface()
	}
	return out, true
}

func scalar(v any) (string, error) {
	if v == nil {
		return "null", nil
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.String:
		return quote(rv.String()), nil
	case reflect.Bool:
		return strconv.FormatBool(rv.Bool()), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(rv.Int(), 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.FormatUint(rv.Uint(), 10), nil
	case reflect.Float32, reflect.Float64:
		return float(rv.Float()), nil
	}
	return "", fmt.Errorf("cannot write a %T into the manifest", v)
}

// float formats f so PyYAML reads a float back: YAML 1.1 floats need a dot.
func float(f float64) string {
	switch {
	case math.IsNaN(f):
		return ".nan"
	case math.IsInf(f, 1):
		return ".inf"
	case math.IsInf(f, -1):
		return "-.inf"
	}
	if a := math.Abs(f); a == 0 || (a >= 1e-4 && a < 1e15) {
		s := strconv.FormatFloat(f, 'f', -1, 64)
		if !strings.Contains(s, ".") {
			s += ".0"
		}
		return s
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // e.g. 1.5e+20 or 1e+20
	if !strings.Contains(s, ".") {
		s = strings.Replace(s, "e", ".0e", 1)
	}
	return s
}

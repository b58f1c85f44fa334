package connections

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// This file reads connections the way Airflow does: Connection._parse_from_uri,
// Connection.from_json, the environment-variables secrets backend and the
// local-filesystem secrets backend. No error here ever quotes a password or
// any part of a URI that could hold one.

// extraKey is the URI query parameter that carries the whole extra as JSON.
const extraKey = "__extra__"

// EnvPrefix is the prefix of connection environment variables.
const EnvPrefix = "AIRFLOW_CONN_"

// uriHelp ends URI errors: the usual cause is an unencoded character in the
// password.
const uriHelp = " (form: conn-type://login:password@host:port/schema?key=value; percent-encode '@', ':', '/', '?' and '#' in the login and password)"

// ParseURI parses Airflow's URI form, e.g.
// "aws://AKIA...:secret@/?region_name=eu-west-1". connID names the result.
// Every part is percent-decoded; the conn type comes from the scheme with
// '-' turned into '_' (and postgresql into postgres), as Airflow does.
func ParseURI(connID, uri string) (Connection, error) {
	c := Connection{ConnID: connID}
	fail := func(msg string) (Connection, error) {
		return Connection{ConnID: connID}, fmt.Errorf("connection %q: URI %s%s", connID, msg, uriHelp)
	}
	uri = strings.TrimSpace(uri)
	switch n := strings.Count(uri, "://"); {
	case n == 0:
		return fail(`has no "://" after the conn type`)
	case n > 2:
		return fail(fmt.Sprintf(`contains "://" %d times; at most two are allowed (conn-type://protocol://host)`, n))
	}
	scheme, rest, _ := strings.Cut(uri, "://")
	if !validScheme(scheme) {
		return fail("does not start with a valid conn type (a letter, then letters, digits, '+', '-' or '.')")
	}
	c.ConnType = normalizeConnType(strings.ToLower(scheme))

	// A second "://" means the host carries its own protocol, as in
	// "http-conn://https://example.com"; Airflow keeps it in the host.
	protocol := ""
	if strings.Contains(rest, "://") {
		p, r, _ := strings.Cut(rest, "://")
		if strings.ContainsAny(p, "@:") || !validScheme(p) {
			return fail(`has a second "://" that does not follow a host protocol`)
		}
		protocol, rest = strings.ToLower(p), r
	}

	netloc, tail := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		netloc, tail = rest[:i], rest[i:]
	}
	tail, _, _ = strings.Cut(tail, "#")
	path, query, _ := strings.Cut(tail, "?")

	userinfo, hostport := "", netloc
	if i := strings.LastIndex(netloc, "@"); i >= 0 {
		userinfo, hostport = netloc[:i], netloc[i+1:]
	}
	if userinfo != "" {
		login, password, hasPassword := strings.Cut(userinfo, ":")
		c.Login = unquote(login)
		if hasPassword {
			c.Password = unquote(password)
		}
	}

	var hostname, port string
	if before, bracketed, ok := strings.Cut(hostport, "["); ok && before == "" {
		h, after, closed := strings.Cut(bracketed, "]")
		if !closed {
			return fail("has an IPv6 host without a closing ']'")
		}
		if after != "" && !strings.HasPrefix(after, ":") {
			return fail("has text after the IPv6 host that is not a :port")
		}
		hostname, port = h, strings.TrimPrefix(after, ":")
	} else {
		hostname, port, _ = strings.Cut(hostport, ":")
	}
	c.Host = unquote(strings.ToLower(hostname))
	if strings.Contains(c.Host, "/") {
		// An encoded path as host (e.g. a unix socket): Airflow keeps its case.
		h, _, _ := strings.Cut(hostport, ":")
		c.Host = unquote(h)
	}
	if protocol != "" && c.Host != "" {
		c.Host = protocol + "://" + c.Host
	}
	if port != "" {
		p, err := parsePort(port)
		if err != nil {
			return fail(err.Error())
		}
		c.Port = p
	}
	if len(path) > 1 {
		c.Schema = unquote(path[1:])
	}
	if query != "" {
		extra, err := queryExtra(query)
		if err != nil {
			return Connection{ConnID: connID}, fmt.Errorf("connection %q: %v", connID, err)
		}
		c.Extra = extra
	}
	return c, nil
}

// parsePort accepts what Python's urlsplit accepts: ASCII digits, 0..65535.
// Non-digit text is not quoted back: a misplaced password lands here.
func parsePort(s string) (int, error) {
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, errors.New("has a port that is not an integer")
		}
	}
	p, err := strconv.Atoi(s)
	if err != nil || p > 65535 {
		return 0, fmt.Errorf("has port %s, outside 0-65535", s)
	}
	return p, nil
}

// queryExtra turns the query string into the extra's JSON text as Airflow's
// dict(parse_qsl(query, keep_blank_values=True)) does: the __extra__
// parameter verbatim, else an object of the parameters in order of first
// appearance. A repeated key keeps its last value, as in Airflow; a list
// cannot be written in the URI form (use __extra__ or the JSON form).
func queryExtra(query string) (string, error) {
	var keys []string
	values := map[string]string{}
	for _, pair := range strings.Split(query, "&") {
		if pair == "" {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		k, v = unquote(strings.ReplaceAll(k, "+", " ")), unquote(strings.ReplaceAll(v, "+", " "))
		if _, seen := values[k]; !seen {
			keys = append(keys, k)
		}
		values[k] = v
	}
	if v, ok := values[extraKey]; ok {
		if err := checkExtraJSON([]byte(v)); err != nil {
			return "", fmt.Errorf("URI parameter %s %v", extraKey, err)
		}
		return v, nil
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		writeJSONString(&b, k)
		b.WriteByte(':')
		writeJSONString(&b, values[k])
	}
	b.WriteByte('}')
	return b.String(), nil
}

// writeJSONString writes s as a JSON string without HTML escaping, so "&"
// stays "&" as in Python's json.dumps.
func writeJSONString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)       // encoding a string cannot fail
	b.Truncate(b.Len() - 1) // drop Encode's newline
}

// checkExtraJSON requires a JSON object. The error names the byte offset,
// never the text: extras can hold secrets too.
func checkExtraJSON(data []byte) error {
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("is not a JSON object (%s)", describeJSONError(err))
	}
	return nil
}

func describeJSONError(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("invalid JSON at byte %d", syn.Offset)
	case errors.As(err, &typ):
		return fmt.Sprintf("found a JSON %s", typ.Value)
	case errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "unexpected end"):
		return "the JSON ends too early"
	}
	return "invalid JSON"
}

func validScheme(s string) bool {
	if s == "" || !isLetter(s[0]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if !isLetter(ch) && !(ch >= '0' && ch <= '9') && ch != '+' && ch != '-' && ch != '.' {
			return false
		}
	}
	return true
}

func isLetter(ch byte) bool { return ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' }

// normalizeConnType applies Airflow's two rewrites of the conn type.
func normalizeConnType(t string) string {
	if t == "postgresql" {
		return "postgres"
	}
	return strings.ReplaceAll(t, "-", "_")
}

// unquote decodes %XX escapes like Python's urllib.parse.unquote: malformed
// escapes are kept as written rather than rejected.
func unquote(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// jsonFields are the keys a connection object may have (Airflow's
// Connection parameters, plus extra_dejson from the local-filesystem backend).
var jsonFields = []string{"conn_id", "conn_type", "description", "extra", "extra_dejson", "host", "login", "password", "port", "schema", "uri"}

// ParseJSON parses Airflow's JSON form: {"conn_type": ..., "host": ...,
// "port": 5432 or "5432", "extra": {...} or "..."}. An object extra is stored
// as compact JSON text; a "uri" key alone is parsed as the URI form.
func ParseJSON(connID string, data []byte) (Connection, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return Connection{ConnID: connID}, fmt.Errorf("connection %q: not a JSON object (%s)", connID, describeJSONError(err))
	}
	if fields == nil {
		return Connection{ConnID: connID}, fmt.Errorf("connection %q: JSON is null, not a connection object", connID)
	}
	return fromFields(connID, fields)
}

func fromFields(connID string, fields map[string]json.RawMessage) (Connection, error) {
	c := Connection{ConnID: connID}
	fail := func(format string, a ...any) (Connection, error) {
		return Connection{ConnID: connID}, fmt.Errorf("connection %q: %s", connID, fmt.Sprintf(format, a...))
	}
	var unknown []string
	for k := range fields {
		if !contains(jsonFields, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fail("unknown field(s) %s; a connection object may only have %s", strings.Join(unknown, ", "), strings.Join(jsonFields, ", "))
	}
	str := func(key string, dst *string) error {
		raw, ok := fields[key]
		if !ok || isNull(raw) {
			return nil
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			return fmt.Errorf("connection %q: field %s must be a string", connID, key)
		}
		return nil
	}
	if raw, ok := fields["conn_id"]; ok {
		var id string
		if err := json.Unmarshal(raw, &id); err != nil || id != connID {
			return fail("its conn_id field does not match the conn_id %q it is stored under", connID)
		}
	}
	if _, ok := fields["uri"]; ok {
		for _, k := range []string{"conn_type", "host", "login", "password", "schema", "port", "extra", "extra_dejson"} {
			if _, mixed := fields[k]; mixed {
				return fail("has both uri and %s; give either a uri or the separate fields, not both", k)
			}
		}
		var uri string
		if err := str("uri", &uri); err != nil {
			return Connection{ConnID: connID}, err
		}
		return ParseURI(connID, uri)
	}
	for key, dst := range map[string]*string{"conn_type": &c.ConnType, "host": &c.Host, "login": &c.Login, "password": &c.Password, "schema": &c.Schema} {
		if err := str(key, dst); err != nil {
			return Connection{ConnID: connID}, err
		}
	}
	c.ConnType = normalizeConnType(c.ConnType)
	if raw, ok := fields["port"]; ok {
		p, err := jsonPort(raw)
		if err != nil {
			return fail("%v", err)
		}
		c.Port = p
	}
	_, hasExtra := fields["extra"]
	_, hasDejson := fields["extra_dejson"]
	if hasExtra && hasDejson {
		return fail("has both extra and extra_dejson; give only one")
	}
	for _, key := range []string{"extra", "extra_dejson"} {
		raw, ok := fields[key]
		if !ok || isNull(raw) {
			continue
		}
		extra, err := jsonExtra(raw)
		if err != nil {
			return fail("field %s %v", key, err)
		}
		c.Extra = extra
	}
	return c, nil
}

// jsonPort accepts an integer or a string of digits, as Airflow's int(port).
func jsonPort(raw json.RawMessage) (int, error) {
	if isNull(raw) {
		return 0, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		s = strings.TrimSpace(s)
		if s == "" {
			return 0, nil
		}
		p, err := parsePort(s)
		if err != nil {
			return 0, fmt.Errorf("port %q is not an integer in 0-65535", s)
		}
		return p, nil
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, errors.New("port must be an integer or a string of digits")
	}
	p, err := strconv.Atoi(n.String())
	if err != nil || p < 0 || p > 65535 {
		return 0, fmt.Errorf("port %s is not an integer in 0-65535", n)
	}
	return p, nil
}

// jsonExtra stores an object extra as compact JSON (key order kept) and
// checks that a string extra holds a JSON object.
func jsonExtra(raw json.RawMessage) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if strings.TrimSpace(s) == "" {
			return "", nil
		}
		if err := checkExtraJSON([]byte(s)); err != nil {
			return "", fmt.Errorf("is a string that %v", err)
		}
		return s, nil
	}
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return "", errors.New("must be a JSON object or a string holding one")
	}
	var b bytes.Buffer
	if err := json.Compact(&b, trimmed); err != nil {
		return "", fmt.Errorf("is not valid JSON (%s)", describeJSONError(err))
	}
	return b.String(), nil
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Parse reads a connection value in either form, as Airflow's environment
// backend does: after trimming, a value starting with "{" is JSON, anything
// else a URI.
func Parse(connID, value string) (Connection, error) {
	value = strings.TrimSpace(value)
	if value == "" {
		return Connection{ConnID: connID}, fmt.Errorf("connection %q: the value is empty; give a URI or a JSON object", connID)
	}
	if value[0] == '{' {
		return ParseJSON(connID, []byte(value))
	}
	return ParseURI(connID, value)
}

// EnvName is the environment variable that holds connID:
// AIRFLOW_CONN_ plus the conn id upper-cased.
func EnvName(connID string) string { return EnvPrefix + strings.ToUpper(connID) }

// FromEnv reads AIRFLOW_CONN_<CONN_ID upper-cased> (URI or JSON form).
// ok is false when the variable is not set; a set but invalid variable gives
// ok=true and an error naming the variable.
func FromEnv(connID string) (c Connection, ok bool, err error) {
	name := EnvName(connID)
	v, ok := os.LookupEnv(name)
	if !ok {
		return Connection{}, false, nil
	}
	c, err = Parse(connID, v)
	if err != nil {
		return c, true, fmt.Errorf("%s: %w", name, err)
	}
	return c, true, nil
}

// LoadFile reads a connections file as Airflow's local-filesystem secrets
// backend does: .json or .yaml/.yml holding a mapping of conn_id to a URI
// string or a connection object, or .env with CONN_ID=URI lines (a value
// starting with "{" is read as JSON). A conn_id may also map to a list of
// one value. Errors name the file and the conn_id.
func LoadFile(path string) (map[string]Connection, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("connections file: %w", err)
	}
	var conns map[string]Connection
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".json":
		conns, err = loadJSON(data)
	case ".yaml", ".yml":
		conns, err = loadYAML(data)
	case ".env":
		conns, err = loadEnv(data)
	default:
		return nil, fmt.Errorf("connections file %s: unsupported extension %q; use .json, .yaml, .yml or .env", path, ext)
	}
	if err != nil {
		return nil, fmt.Errorf("connections file %s: %w", path, err)
	}
	return conns, nil
}

func loadJSON(data []byte) (map[string]Connection, error) {
	out := map[string]Connection{}
	if len(bytes.TrimSpace(data)) == 0 {
		return out, nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("not a JSON object mapping conn_id to a URI or connection object (%s)", describeJSONError(err))
	}
	for id, raw := range top {
		if err := addEntry(out, id, raw); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// addEntry parses one conn_id's value (JSON text): a URI string, an object,
// or a list holding one of those.
func addEntry(out map[string]Connection, id string, raw json.RawMessage) error {
	if id == "" {
		return errors.New("a connection has an empty conn_id")
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) == nil {
		switch len(list) {
		case 0:
			return nil
		case 1:
			raw = list[0]
		default:
			return fmt.Errorf("connection %q has %d values; give exactly one", id, len(list))
		}
	}
	var uri string
	if json.Unmarshal(raw, &uri) == nil {
		c, err := ParseURI(id, uri)
		if err != nil {
			return err
		}
		out[id] = c
		return nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return fmt.Errorf("connection %q must be a URI string or a connection object", id)
	}
	c, err := fromFields(id, fields)
	if err != nil {
		return err
	}
	out[id] = c
	return nil
}

func loadYAML(data []byte) (map[string]Connection, error) {
	out := map[string]Connection{}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("not valid YAML: %v", err)
	}
	if len(doc.Content) == 0 {
		return out, nil
	}
	top := doc.Content[0]
	if top.Kind != yaml.MappingNode {
		return nil, errors.New("the top level must be a mapping of conn_id to a URI or connection object")
	}
	lines := map[string]int{}
	for i := 0; i+1 < len(top.Content); i += 2 {
		id, val := top.Content[i].Value, top.Content[i+1]
		if first, dup := lines[id]; dup {
			return nil, fmt.Errorf("connection %q is defined twice (lines %d and %d)", id, first, top.Content[i].Line)
		}
		lines[id] = top.Content[i].Line
		if val.Kind == yaml.ScalarNode && val.ShortTag() != "!!str" && val.ShortTag() != "!!null" {
			return nil, fmt.Errorf("connection %q must be a URI string or a connection object", id)
		}
		var v any
		if err := val.Decode(&v); err != nil {
			return nil, fmt.Errorf("connection %q (line %d) cannot be read", id, val.Line)
		}
		raw, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("connection %q (line %d) holds a value that has no JSON form", id, val.Line)
		}
		if err := addEntry(out, id, raw); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func loadEnv(data []byte) (map[string]Connection, error) {
	out := map[string]Connection{}
	seen := map[string]int{}
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		switch {
		case !ok:
			return nil, fmt.Errorf("line %d has no '='; write CONN_ID=URI", n+1)
		case key == "":
			return nil, fmt.Errorf("line %d has an empty conn_id before '='", n+1)
		case seen[key] != 0:
			return nil, fmt.Errorf("connection %q is defined twice (lines %d and %d)", key, seen[key], n+1)
		}
		seen[key] = n + 1
		c, err := Parse(key, value)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n+1, err)
		}
		out[key] = c
	}
	return out, nil
}

// Package redact masks secrets in what a task shows: log records, command
// output, XCom-bound text. It is the one implementation the task runtime
// (package bundles), the task catalogue (package tasks) and the local
// supervisor share, so a rule added here (multi-line secrets, secrets cut
// across chunks) holds everywhere at once.
//
// A Set holds the patterns. Add registers a value and what it shows as when
// printed piecemeal: every line of a multi-line value (a PEM key printed
// line by line never matches the whole key), and, for a JSON object, every
// string inside it with its lines (Airflow's masker masks each value of a
// dict secret; `jq -r .private_key` prints such a value with real newlines).
//
// Lines splits a stream into lines and masks each, holding back only what
// could be the start of a secret that the next chunk completes, so memory
// stays bounded by the longest line kept plus the longest secret.
package redact

import (
	"encoding/json"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"
)

// Mask replaces every secret.
const Mask = "***"

// MinLength is the shortest value masked: masking "a" or "no" would garble
// all output (Airflow skips values under [logging] min_length_masked_secret,
// 5 by default; we mask from 3).
const MinLength = 3

// MinPartLength is the shortest line (or JSON string) of a multi-line
// secret that is masked on its own: "{", "}" or "-----" carry no secret, and
// masking them would garble unrelated output.
const MinPartLength = 5

// Set is a set of secrets to mask. The zero value and nil are empty sets;
// all methods are safe for concurrent use.
type Set struct {
	mu   sync.RWMutex
	pats []string // unique, longest first
	seen map[string]bool
}

// New returns a set holding values (see Add).
func New(values ...string) *Set {
	s := &Set{}
	for _, v := range values {
		s.Add(v)
	}
	return s
}

// Add registers value, each line of it when it has several, and the string
// values of a JSON object with their lines.
func (s *Set) Add(value string) { s.add(value, true) }

// AddExtra registers a connection's extra as Airflow's masker does: the
// whole text, with its lines, and inside a JSON object the values under
// the names names says are secret (a "token", a "private_key"), at any
// depth, with their lines. Its other values (a region, a bucket) are no
// secrets: masking them would garble every line that names them.
func (s *Set) AddExtra(extra string, names Names) {
	if s == nil {
		return
	}
	s.add(extra, false)
	var doc any
	if json.Unmarshal([]byte(extra), &doc) != nil {
		return
	}
	s.addSensitive(doc, names)
}

// addSensitive adds every string under a sensitive name inside v.
func (s *Set) addSensitive(v any, names Names) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if !names.Sensitive(k) {
				s.addSensitive(e, names)
				continue
			}
			if str, ok := e.(string); ok {
				s.Add(str)
			} else if data, err := json.Marshal(e); err == nil {
				s.Add(string(data)) // an object or list: its strings, as Add does
			}
		}
	case []any:
		for _, e := range x {
			s.addSensitive(e, names)
		}
	}
}

// add registers value and its lines, and with leaves the string values of
// a JSON object or list it holds.
func (s *Set) add(value string, leaves bool) {
	if s == nil || len(value) < MinLength {
		return
	}
	parts := []string{value}
	parts = append(parts, lines(value)...)
	if leaves {
		for _, leaf := range jsonStrings(value) {
			if len(leaf) >= MinPartLength {
				parts = append(parts, leaf)
			}
			parts = append(parts, lines(leaf)...)
		}
	}
	// What a part shows as once rendered, when it holds invisible bytes
	// itself: output is matched as rendered too (visible.go).
	for _, p := range parts {
		if v := visibleForm(p); v != p && len(v) >= MinLength {
			parts = append(parts, v)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string]bool{}
	}
	var fresh []string
	for _, p := range parts {
		if !s.seen[p] {
			s.seen[p] = true
			fresh = append(fresh, p)
		}
	}
	if len(fresh) == 0 {
		return
	}
	// A new slice, never the old one changed in place: a String running
	// concurrently keeps scanning the patterns it started with.
	pats := append(append(make([]string, 0, len(s.pats)+len(fresh)), s.pats...), fresh...)
	// Longest first: at one position the longest secret wins, so a secret
	// containing another is masked whole.
	sort.SliceStable(pats, func(i, j int) bool { return len(pats[i]) > len(pats[j]) })
	s.pats = pats
}

// lines returns the lines of a multi-line value worth masking alone
// (trimmed of surrounding blanks and \r), or nil for a single line.
func lines(v string) []string {
	if !strings.ContainsAny(v, "\n\r") {
		return nil
	}
	var out []string
	for _, l := range strings.FieldsFunc(v, func(r rune) bool { return r == '\n' || r == '\r' }) {
		if l = strings.TrimSpace(l); len(l) >= MinPartLength {
			out = append(out, l)
		}
	}
	return out
}

// jsonStrings returns the string values inside a JSON object or array
// (keys excluded), or nil when v is not one.
func jsonStrings(v string) []string {
	t := strings.TrimSpace(v)
	if t == "" || (t[0] != '{' && t[0] != '[') || !json.Valid([]byte(t)) {
		return nil
	}
	var doc any
	if json.Unmarshal([]byte(t), &doc) != nil {
		return nil
	}
	var out []string
	var walk func(any)
	walk = func(x any) {
		switch y := x.(type) {
		case string:
			out = append(out, y)
		case map[string]any:
			for _, e := range y {
				walk(e)
			}
		case []any:
			for _, e := range y {
				walk(e)
			}
		}
	}
	walk(doc)
	return out
}

// Empty reports whether the set masks nothing.
func (s *Set) Empty() bool {
	if s == nil {
		return true
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.pats) == 0
}

// MaxLen is the length of the longest pattern (0 for an empty set).
func (s *Set) MaxLen() int {
	if s == nil {
		return 0
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(s.pats) == 0 {
		return 0
	}
	return len(s.pats[0])
}

func (s *Set) patterns() []string {
	if s == nil {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.pats
}

// String masks every secret in text.
func (s *Set) String(text string) string {
	out, _ := mask(text, s.patterns(), true)
	return out
}

// Any masks secrets in a decoded JSON-like value (strings, maps, slices);
// maps and slices are copied, not changed in place. Other scalars are
// rendered as JSON and checked too, so a numeric secret does not leak
// through a number field: a match turns the value into its masked text.
func (s *Set) Any(v any) any {
	pats := s.patterns()
	if len(pats) == 0 {
		return v
	}
	return maskAny(v, pats)
}

func maskAny(v any, pats []string) any {
	switch x := v.(type) {
	case string:
		out, _ := mask(x, pats, true)
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = maskAny(e, pats)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = maskAny(e, pats)
		}
		return out
	case nil, bool:
		return x
	}
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	if out, _ := mask(string(b), pats, true); out != string(b) {
		return out
	}
	return v
}

// mask replaces the secrets in text, as written and as rendered (the
// visible view: see visible.go). With final false, text is a piece of a
// stream that continues: mask stops before the bytes that could be the
// start of a secret the next piece completes and returns how many bytes of
// text it consumed (the caller keeps the rest for the next call). Matching
// is leftmost, and longest at one position.
func mask(text string, pats []string, final bool) (string, int) {
	if len(pats) == 0 {
		return text, len(text)
	}
	hold := 0 // what may be the start of a secret: the longest one, less a byte
	if !final {
		hold = len(pats[0]) - 1
	}
	limit := max(0, len(text)-hold) // bytes that may be emitted
	spans, limit := findSpans(text, pats, limit)
	if view, at, ok := visibleView(text); ok {
		// The same in the view, mapped back to text; what is held back is
		// counted in visible bytes, from the first one held.
		vspans, vlimit := findSpans(view, pats, max(0, len(view)-hold))
		for _, sp := range vspans {
			spans = append(spans, [2]int{at[sp[0]], at[sp[1]-1] + 1})
		}
		if vlimit < len(view) {
			limit = min(limit, at[vlimit])
		}
	}
	if final {
		limit = len(text)
	} else {
		limit = min(limit, incompleteTail(text))
	}
	// A secret that starts before the limit goes out whole.
	for grown := true; grown; {
		grown = false
		for _, sp := range spans {
			if sp[0] < limit && sp[1] > limit {
				limit, grown = sp[1], true
			}
		}
	}
	return applySpans(text, spans, limit), limit
}

// findSpans finds the secrets starting before limit in s, leftmost and
// longest at one position, and extends limit to the end of one straddling
// it (it is complete here: take it whole).
func findSpans(s string, pats []string, limit int) ([][2]int, int) {
	// next[j] is where pats[j] next occurs at or after the scan position,
	// -1 when it does not occur again; refreshed only when passed, so the
	// whole scan costs one strings.Index pass per pattern.
	next := make([]int, len(pats))
	found := false
	for j, p := range pats {
		next[j] = strings.Index(s, p)
		found = found || next[j] >= 0
	}
	if !found {
		return nil, limit
	}
	var spans [][2]int
	for {
		best := -1
		for j := range pats {
			if next[j] >= 0 && (best < 0 || next[j] < next[best]) {
				best = j // pats are longest first: ties keep the longer one
			}
		}
		if best < 0 || next[best] >= limit {
			return spans, limit
		}
		start, end := next[best], next[best]+len(pats[best])
		spans = append(spans, [2]int{start, end})
		limit = max(limit, end)
		for j, p := range pats {
			if next[j] >= 0 && next[j] < end {
				if k := strings.Index(s[end:], p); k >= 0 {
					next[j] = end + k
				} else {
					next[j] = -1
				}
			}
		}
	}
}

// incompleteTail is where an invisible unit cut at the end of text begins
// (an escape sequence or a character the next piece completes), or
// len(text).
func incompleteTail(text string) int {
	for i := max(0, len(text)-maxEscape); i < len(text); i++ {
		if text[i] != 0x1b && text[i] < utf8.RuneSelf {
			continue
		}
		if n, complete := invisibleAt(text, i); !complete {
			return i
		} else if n > 0 {
			i += n - 1
		}
	}
	return len(text)
}

// applySpans writes text[:limit] with every span starting before limit
// masked (overlapping spans merged).
func applySpans(text string, spans [][2]int, limit int) string {
	if len(spans) == 0 {
		return text[:limit]
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i][0] < spans[j][0] })
	var b strings.Builder
	pos := 0
	for _, sp := range spans {
		if sp[0] >= limit {
			break
		}
		if sp[1] <= pos {
			continue // inside one already masked
		}
		if sp[0] >= pos {
			b.WriteString(text[pos:sp[0]])
			b.WriteString(Mask)
		}
		pos = sp[1]
	}
	if pos < limit {
		b.WriteString(text[pos:limit])
	}
	return b.String()
}

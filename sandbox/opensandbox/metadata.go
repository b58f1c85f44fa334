package opensandbox

import (
	"encoding/base32"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Tags live in OpenSandbox metadata, whose keys and values must be
// Kubernetes-label-safe: at most 63 characters of [A-Za-z0-9._-], starting
// and ending with a letter or digit. Most tag values ("airflow-go-worker",
// unix seconds, sandbox names) already are, and are stored as they are, so
// they stay readable and filterable on the server. Others (the owner
// "<dag>/<run>", the network policy JSON, paths) are stored losslessly:
//
//	key          = "b32.<n>.<first chunk>"   base32 (lowercase, no padding)
//	key--2 ... key--n = the following chunks, 63 characters each
//
// so every value is recovered exactly and Attach can compare the owner as
// the portable API expects. A raw value that happens to start with "b32."
// is encoded too, to keep decoding unambiguous.
//
// Tag keys must themselves be label-safe, at most maxTagKeyLen characters,
// and must not end in "--<digits>" (the continuation keys) nor be one of the
// Python provider's metadata keys (created-by, name), which are written at
// create time and are not tags.
const (
	metaCreatedBy      = "created-by" // the Python provider's marker
	metaCreatedByValue = "airflow"
	metaName           = "name"

	encodedPrefix = "b32."
	maxLabelLen   = 63
	maxTagKeyLen  = 55 // leaves room for "--<n>"
	maxChunks     = 99
)

var b32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// isLabel reports whether s is a label: letters, digits, '-', '_' and '.',
// starting and ending with a letter or digit. (Loops rather than regexps
// here: package-level regexps are compiled at every process start.)
func isLabel(s string) bool {
	if s == "" || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// isContinuation reports whether key has the shape "<base>--<digits>" of
// a long value's continuation chunk.
func isContinuation(key string) bool {
	i := strings.LastIndex(key, "--")
	if i < 1 || i+2 == len(key) {
		return false
	}
	for _, c := range []byte(key[i+2:]) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// isLabelValue reports whether v may be stored as is.
func isLabelValue(v string) bool {
	return v == "" || len(v) <= maxLabelLen && isLabel(v)
}

// checkTagKey says why key cannot be a tag, or "" when it can.
func checkTagKey(key string) string {
	switch {
	case key == metaCreatedBy || key == metaName:
		return fmt.Sprintf("tag %q is reserved for the Python provider's metadata; choose another name", key)
	case len(key) > maxTagKeyLen || !isLabel(key):
		return fmt.Sprintf("tag %q cannot be OpenSandbox metadata: names must be at most %d letters, digits, '-', '_' or '.', starting and ending with a letter or digit", key, maxTagKeyLen)
	case isContinuation(key):
		return fmt.Sprintf("tag %q ends in --<digits>, which this driver uses for long values; choose another name", key)
	}
	return ""
}

// encodeTags turns tags into metadata pairs.
func encodeTags(tags map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(tags))
	var bad []string
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		if msg := checkTagKey(k); msg != "" {
			bad = append(bad, msg)
			continue
		}
		pairs, err := encodeValue(k, tags[k])
		if err != nil {
			bad = append(bad, err.Error())
			continue
		}
		for pk, pv := range pairs {
			out[pk] = pv
		}
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(bad, "; "))
	}
	return out, nil
}

// encodeValue stores one tag as one or more metadata pairs.
func encodeValue(key, v string) (map[string]string, error) {
	if isLabelValue(v) && !strings.HasPrefix(v, encodedPrefix) {
		return map[string]string{key: v}, nil
	}
	enc := b32.EncodeToString([]byte(v))
	for n := 1; n <= maxChunks; n++ {
		head := encodedPrefix + strconv.Itoa(n) + "."
		firstCap := maxLabelLen - len(head)
		if len(enc) > firstCap+(n-1)*maxLabelLen {
			continue
		}
		out := map[string]string{}
		first := min(firstCap, len(enc))
		out[key] = head + enc[:first]
		rest := enc[first:]
		for i := 2; len(rest) > 0; i++ {
			c := min(maxLabelLen, len(rest))
			out[key+"--"+strconv.Itoa(i)] = rest[:c]
			rest = rest[c:]
		}
		return out, nil
	}
	return nil, fmt.Errorf("tag %q: the value is %d bytes, too long to store as OpenSandbox metadata; keep tag values under 3 KB", key, len(v))
}

// decodeTags recovers tags from metadata, skipping the Python provider's
// keys and continuation keys.
func decodeTags(meta map[string]string) map[string]string {
	tags := map[string]string{}
	skip := map[string]bool{metaCreatedBy: true, metaName: true}
	for _, k := range slices.Sorted(maps.Keys(meta)) {
		v := meta[k]
		if !strings.HasPrefix(v, encodedPrefix) {
			continue
		}
		n, rest, ok := strings.Cut(v[len(encodedPrefix):], ".")
		chunks, err := strconv.Atoi(n)
		if !ok || err != nil || chunks < 1 || chunks > maxChunks {
			continue
		}
		enc := rest
		complete := true
		for i := 2; i <= chunks; i++ {
			part, ok := meta[k+"--"+strconv.Itoa(i)]
			if !ok {
				complete = false
				break
			}
			enc += part
		}
		raw, err := b32.DecodeString(enc)
		if !complete || err != nil {
			continue // not ours or damaged: left as the raw value below
		}
		tags[k] = string(raw)
		for i := 2; i <= chunks; i++ {
			skip[k+"--"+strconv.Itoa(i)] = true
		}
	}
	for k, v := range meta {
		if _, done := tags[k]; done || skip[k] {
			continue
		}
		tags[k] = v
	}
	return tags
}

// metadataPatch is the merge patch that turns metadata cur into want,
// leaving keys in keep untouched.
func metadataPatch(cur, want map[string]string, keep map[string]bool) map[string]*string {
	patch := map[string]*string{}
	for k := range cur {
		if _, ok := want[k]; !ok && !keep[k] {
			patch[k] = nil
		}
	}
	for k, v := range want {
		if old, ok := cur[k]; !ok || old != v {
			patch[k] = &v
		}
	}
	return patch
}

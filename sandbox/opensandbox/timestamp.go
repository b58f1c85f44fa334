package opensandbox

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

// Timestamp reads the times the servers send without trusting one format:
// the lifecycle server is Python (ISO 8601, with or without a zone or
// fraction), execd is Go (RFC 3339), and numbers are unix seconds or
// milliseconds. A time it cannot read is left zero rather than failing the
// whole answer: no decision of the driver depends on these values alone.
type Timestamp struct{ time.Time }

var timestampLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02T15:04:05.999999999",       // naive: UTC by the server's convention
	"2006-01-02 15:04:05.999999999Z07:00", // str(datetime)
	"2006-01-02 15:04:05.999999999",
}

// UnmarshalJSON accepts a string or a number.
func (t *Timestamp) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		t.Time = time.Time{}
		return nil
	}
	var s string
	if json.Unmarshal(b, &s) == nil {
		for _, layout := range timestampLayouts {
			if v, err := time.Parse(layout, s); err == nil {
				t.Time = v.UTC()
				return nil
			}
		}
		t.Time = time.Time{}
		return nil
	}
	if n, err := strconv.ParseFloat(string(b), 64); err == nil {
		if n > 1e12 { // milliseconds
			t.Time = time.UnixMilli(int64(n)).UTC()
		} else {
			t.Time = time.Unix(int64(n), 0).UTC()
		}
		return nil
	}
	t.Time = time.Time{}
	return nil
}

// MarshalJSON writes RFC 3339, or null for the zero time.
func (t Timestamp) MarshalJSON() ([]byte, error) {
	if t.IsZero() {
		return []byte("null"), nil
	}
	return json.Marshal(t.Time.Format(time.RFC3339Nano))
}

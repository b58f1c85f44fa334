package registry

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a backend option given as a Go duration ("90s", "2m") or a
// number of seconds, as bundle configs write durations elsewhere.
type Duration time.Duration

// UnmarshalJSON accepts "90s" or 90.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil || v < 0 {
			return fmt.Errorf("%q is not a duration such as \"90s\" or \"2m\"", s)
		}
		*d = Duration(v)
		return nil
	}
	var secs float64
	if err := json.Unmarshal(b, &secs); err != nil || secs < 0 || secs > float64(1<<33) {
		return fmt.Errorf("%s is neither a duration such as \"90s\" nor a number of seconds", b)
	}
	*d = Duration(secs * float64(time.Second))
	return nil
}

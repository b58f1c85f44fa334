// Package randhex makes the random hex strings this module uses for names
// (sandbox names, temporary files, test keys): one implementation, from
// crypto/rand.
package randhex

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
)

// String returns 2n lower-case hex characters from n random bytes. Since
// Go 1.24 crypto/rand.Read cannot fail (the runtime aborts instead), so
// neither can String.
func String(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Is reports whether s is min to max lower-case hex characters, as String
// makes them: the names it made are recognised without a regexp, which
// every process would compile at start-up if it were a package variable.
func Is(s string, min, max int) bool {
	if len(s) < min || len(s) > max {
		return false
	}
	for i := range len(s) {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Suffixed reports whether name ends in "." + min to max lower-case hex
// characters + suffix (".partial"), as a temporary name made from String
// does.
func Suffixed(name, suffix string, min, max int) bool {
	rest, ok := strings.CutSuffix(name, suffix)
	if !ok {
		return false
	}
	dot := strings.LastIndexByte(rest, '.')
	return dot >= 0 && Is(rest[dot+1:], min, max)
}

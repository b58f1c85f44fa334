// Package randhex makes the random hex strings this module uses for names
// (sandbox names, temporary files, test keys): one implementation, from
// crypto/rand.
package randhex

import (
	"crypto/rand"
	"encoding/hex"
)

// String returns 2n lower-case hex characters from n random bytes. Since
// Go 1.24 crypto/rand.Read cannot fail (the runtime aborts instead), so
// neither can String.
func String(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

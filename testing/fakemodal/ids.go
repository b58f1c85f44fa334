package fakemodal

import (
	"crypto/rand"
	"encoding/binary"
	"strings"
	"time"
)

// Object ids in the shapes Modal mints, because both clients route on them
// (modal 1.6.4 sandbox/_common.py _is_v1_sandbox_id, modal-go isV1SandboxID;
// test ids in modal-go's sandbox_test.go):
//
//	V1 sandbox   sb- + 22 base62 characters  (e.g. sb-nGEijt9WbBMlGrsPH9FOaC)
//	V2 sandbox   sb- + a 26-character ULID   (e.g. sb-01ARZ3NDEKTSV4RRFFQ69G5FAV)
//	task         ta- + 22 base62; a V2 sandbox's task id ends in "V", the
//	             marker the Python client reads (_is_v2_task_id)
//	app, image,  ap-, im-, st- + 22 base62
//	secret
const (
	base62    = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
)

func randomBase62(n int) string {
	out := make([]byte, n)
	buf := make([]byte, 1)
	for i := 0; i < n; {
		if _, err := rand.Read(buf); err != nil {
			panic(err) // crypto/rand never fails on Linux
		}
		if buf[0] >= 248 { // 248 = 4*62: keeps the draw uniform
			continue
		}
		out[i] = base62[buf[0]%62]
		i++
	}
	return string(out)
}

// ulid is 48 bits of Unix milliseconds then 80 random bits, in Crockford
// base32: 26 characters, sortable by creation time.
func ulid(t time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(t.UnixMilli())<<16)
	if _, err := rand.Read(b[6:]); err != nil {
		panic(err)
	}
	hi, lo := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	out := make([]byte, 26)
	for i := 25; i >= 0; i-- { // 26*5 = 130 bits; the top two are zero
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out)
}

func newV1SandboxID() string { return "sb-" + randomBase62(22) }
func newV2SandboxID() string { return "sb-" + ulid(time.Now()) }
func newV1TaskID() string {
	for {
		if id := "ta-" + randomBase62(22); id[len(id)-1] != 'V' {
			return id
		}
	}
}
func newV2TaskID() string { return "ta-" + randomBase62(21) + "V" }
func newObjectID(prefix string) string {
	return prefix + "-" + randomBase62(22)
}

// isV1SandboxID is the clients' own test: sb- and exactly 22 base62 characters.
func isV1SandboxID(id string) bool {
	if len(id) != 25 || id[:3] != "sb-" {
		return false
	}
	for i := 3; i < len(id); i++ {
		c := id[i]
		if !(c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z') {
			return false
		}
	}
	return true
}

// wellFormedSandboxID: what Modal could have minted (V1, or a ULID V2 id).
// Anything else is not a Modal sandbox id at all, which the fake answers
// with InvalidArgument rather than NotFound.
func wellFormedSandboxID(id string) bool {
	if isV1SandboxID(id) {
		return true
	}
	if len(id) != 29 || id[:3] != "sb-" || id[3] > '7' {
		return false
	}
	for i := 3; i < len(id); i++ {
		if strings.IndexByte(crockford, id[i]) < 0 {
			return false
		}
	}
	return true
}

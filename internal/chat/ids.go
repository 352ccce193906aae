package chat

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"strings"
)

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// newID returns prefix followed by 128 random bits in lower-case base32 (26 characters).
func newID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return prefix + encodeID(b[:])
}

// encodeID is the 26-character lower-case base32 form of the first 128 bits of b.
func encodeID(b []byte) string {
	return strings.ToLower(idEncoding.EncodeToString(b[:16]))
}

// directID is the conv_id of the direct conversation between a and b: derived from the
// unordered pair so that both users get the same id whoever creates it first, and two
// racing creations collide on the primary key instead of making two conversations. It is an
// HMAC under the server's key, so that nobody without the key can compute the id of a pair
// and probe whether two users talk.
func directID(key []byte, a, b string) string {
	m := hmac.New(sha256.New, key)
	m.Write(pair(a, b))
	return "d_" + encodeID(m.Sum(nil))
}

// legacyDirectID is the unkeyed id that servers before the keyed directID gave the pair:
// data directories from then hold direct conversations under it.
func legacyDirectID(a, b string) string {
	sum := sha256.Sum256(pair(a, b))
	return "d_" + encodeID(sum[:])
}

// pair encodes the unordered pair {a, b}; user ids never contain NUL.
func pair(a, b string) []byte {
	if a > b {
		a, b = b, a
	}
	return []byte(a + "\x00" + b)
}

// newDirectIDKey is the key of a Service given none: random, so direct ids stay
// unguessable, but stable only for that Service's lifetime (tests).
func newDirectIDKey() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return k
}

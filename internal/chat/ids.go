package chat

import (
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
	return prefix + strings.ToLower(idEncoding.EncodeToString(b[:]))
}

// directID is the conv_id of the direct conversation between a and b: derived from the
// unordered pair so that both users get the same id whoever creates it first, and two
// racing creations collide on the primary key instead of making two conversations.
func directID(a, b string) string {
	if a > b {
		a, b = b, a
	}
	sum := sha256.Sum256([]byte(a + "\x00" + b))
	return "d_" + strings.ToLower(idEncoding.EncodeToString(sum[:16]))
}

package e2e

import (
	"net/http"
	"strings"
	"testing"
)

// TestAttackSignatureVariants performs the malleability attack of issue 7: the last
// character of a token's signature re-spelt in each of the 3 other ways that decode to the
// same bytes under lenient base64. Only the minted spelling is accepted.
func TestAttackSignatureVariants(t *testing.T) {
	n := start(t)
	tok := n.user(t, "alice")
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, tok[len(tok)-1])
	for i := last &^ 3; i < last&^3+4; i++ {
		variant := tok[:len(tok)-1] + alphabet[i:i+1]
		if variant == tok {
			n.ok(t, "GET", "/v1/conversations", variant, nil)
			continue
		}
		n.fail(t, http.StatusUnauthorized, "GET", "/v1/conversations", variant, nil)
	}
}

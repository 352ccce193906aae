package chat

import (
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// TestDirectID checks the properties direct ids rely on: the same for both orders of the
// pair, different under another key, and not the unkeyed (legacy) hash that anyone can
// compute.
func TestDirectID(t *testing.T) {
	k1, k2 := []byte("key-one"), []byte("key-two")
	id := directID(k1, "alice", "bob")
	if got := directID(k1, "bob", "alice"); got != id {
		t.Fatalf("pair order changes the id: %s vs %s", id, got)
	}
	if got := directID(k2, "alice", "bob"); got == id {
		t.Fatalf("another key gives the same id %s", id)
	}
	sum := sha256.Sum256([]byte("alice\x00bob"))
	legacy := "d_" + strings.ToLower(idEncoding.EncodeToString(sum[:16]))
	if got := legacyDirectID("bob", "alice"); got != legacy {
		t.Fatalf("legacy id %s, want %s", got, legacy)
	}
	if id == legacy || len(id) != len(legacy) || strings.ToLower(id) != id {
		t.Fatalf("keyed id %s: want the legacy form (%s) but not its value", id, legacy)
	}
}

// The store writes "message" events under its own name for the type; a client reads them
// under the protocol's.
func TestStoreEventMessageIsTheProtocols(t *testing.T) {
	if store.EventMessage != protocol.EventMessage {
		t.Fatalf("store.EventMessage %q, protocol.EventMessage %q", store.EventMessage, protocol.EventMessage)
	}
}

package bustest

import (
	"context"
	"crypto/rand"
	"sync"
	"testing"

	"github.com/parleychat/parley/internal/bus"
)

// Keys is a key source in memory for the tests of sealed buses: Add rotates, Reads counts
// how often a bus read it.
type Keys struct {
	mu    sync.Mutex // guards keys and reads
	keys  []bus.Key
	reads int
}

var _ bus.KeySource = (*Keys)(nil)

// NewKeys returns a key source holding one random key, id 1.
func NewKeys(t testing.TB) *Keys {
	k := &Keys{}
	k.Add(t)
	return k
}

// Add adds a random key with the next id and returns it.
func (k *Keys) Add(t testing.TB) bus.Key {
	t.Helper()
	secret := make([]byte, bus.KeySize)
	if _, err := rand.Read(secret); err != nil {
		t.Fatal(err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	key := bus.Key{ID: uint32(len(k.keys) + 1), Secret: secret}
	k.keys = append(k.keys, key)
	return key
}

// BusKeys implements bus.KeySource.
func (k *Keys) BusKeys(context.Context) ([]bus.Key, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.reads++
	return append([]bus.Key(nil), k.keys...), nil
}

// Reads returns how many times BusKeys was called.
func (k *Keys) Reads() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.reads
}

// Seal seals inner with keys and closes the sealed bus when the test ends.
func Seal(t testing.TB, inner bus.Bus, keys bus.KeySource, opts bus.SealOptions) *bus.Sealed {
	t.Helper()
	s, err := bus.Seal(context.Background(), inner, keys, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

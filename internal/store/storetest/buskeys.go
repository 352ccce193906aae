package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/parleychat/parley/internal/store"
)

// busKeyTests are the tests of store.BusKeyReader and store.BusKeyWriter; Run runs them.
func busKeyTests() []struct {
	name string
	fn   func(t *testing.T, s store.Store)
} {
	return []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"BusKeys/AddAndList", testBusKeysAddAndList},
		{"BusKeys/Exists", testBusKeysExists},
		{"BusKeys/ConcurrentFirst", testBusKeysConcurrentFirst},
		{"BusKeys/ConcurrentRotations", testBusKeysConcurrentRotations},
	}
}

func busKey(id int64) store.BusKey {
	secret := bytes.Repeat([]byte{byte(id)}, 32)
	secret[3] = 0 // a NUL inside: the secret is bytes, not text
	return store.BusKey{ID: id, Secret: secret, CreatedAt: 1_700_000_000_000 + id}
}

func listBusKeys(t *testing.T, s store.Store) []store.BusKey {
	t.Helper()
	var keys []store.BusKey
	view(t, s, func(ctx context.Context, tx store.ReadTx) (err error) { keys, err = tx.BusKeys(ctx); return err })
	return keys
}

func testBusKeysAddAndList(t *testing.T, s store.Store) {
	if keys := listBusKeys(t, s); len(keys) != 0 {
		t.Fatalf("a fresh store has keys %v", keys)
	}
	for _, id := range []int64{2, 1, 3} {
		update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.AddBusKey(ctx, busKey(id)) })
	}
	want := []store.BusKey{busKey(1), busKey(2), busKey(3)}
	if got := listBusKeys(t, s); !reflect.DeepEqual(got, want) {
		t.Fatalf("BusKeys = %v, want %v (ascending by id, as added)", got, want)
	}
}

// A second key under an id is refused with ErrExists, the first is kept, and the
// transaction goes on.
func testBusKeysExists(t *testing.T, s store.Store) {
	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.AddBusKey(ctx, busKey(1)) })
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		other := busKey(9)
		other.ID = 1
		if err := tx.AddBusKey(ctx, other); !errors.Is(err, store.ErrExists) {
			return fmt.Errorf("AddBusKey of an existing id = %v, want ErrExists", err)
		}
		return tx.AddBusKey(ctx, busKey(2))
	})
	if got, want := listBusKeys(t, s), []store.BusKey{busKey(1), busKey(2)}; !reflect.DeepEqual(got, want) {
		t.Fatalf("BusKeys = %v, want %v", got, want)
	}
}

// Nodes starting at once each ensure a first key: the store ends with exactly one, and
// every node got that one.
func testBusKeysConcurrentFirst(t *testing.T, s store.Store) {
	const nodes = 8
	got := make([][]store.BusKey, nodes)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Go(func() {
			var err error
			got[i], err = store.EnsureBusKey(t.Context(), s, 1, func() ([]byte, error) { return busKey(int64(10 + i)).Secret, nil })
			if err != nil {
				t.Errorf("EnsureBusKey: %v", err)
			}
		})
	}
	wg.Wait()
	stored := listBusKeys(t, s)
	if len(stored) != 1 || stored[0].ID != 1 {
		t.Fatalf("stored keys %v, want exactly one, id 1", stored)
	}
	for i, keys := range got {
		if !reflect.DeepEqual(keys, stored) {
			t.Errorf("node %d got %v, want the stored %v", i, keys, stored)
		}
	}
}

// Rotations at once each add a key of their own, under consecutive ids.
func testBusKeysConcurrentRotations(t *testing.T, s store.Store) {
	const rotations = 6
	var wg sync.WaitGroup
	for i := range rotations {
		wg.Go(func() {
			if _, err := store.RotateBusKey(t.Context(), s, 1, func() ([]byte, error) { return busKey(int64(i)).Secret, nil }); err != nil {
				t.Errorf("RotateBusKey: %v", err)
			}
		})
	}
	wg.Wait()
	stored := listBusKeys(t, s)
	if len(stored) != rotations {
		t.Fatalf("%d keys after %d rotations: %v", len(stored), rotations, stored)
	}
	for i, k := range stored {
		if k.ID != int64(i+1) {
			t.Errorf("key %d has id %d", i, k.ID)
		}
	}
}

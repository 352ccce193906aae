package pebble

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/parleychat/parley/internal/store"
)

// get reads key into t.val, valid until the next get. found is false for a missing key.
func (t *txn) get(key []byte) (val []byte, found bool, err error) {
	v, closer, err := t.r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("%w: pebble: read: %w", store.ErrUnavailable, err)
	}
	t.val = append(t.val[:0], v...)
	_ = closer.Close()
	return t.val, true, nil
}

// exists reports whether key is present.
func (t *txn) exists(key []byte) (bool, error) {
	_, found, err := t.get(key)
	return found, err
}

// iter opens an iterator over [lower, upper).
func (t *txn) iter(lower, upper []byte) (*pebble.Iterator, error) {
	it, err := t.r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, fmt.Errorf("%w: pebble: iterate: %w", store.ErrUnavailable, err)
	}
	return it, nil
}

// iterEvent decodes the event under it, an iterator over user's log (keys prefix followed by
// int(cursor)), and returns it with its stored value.
func iterEvent(it *pebble.Iterator, prefix []byte, user string) (e store.Event, v []byte, err error) {
	c, _, err := readInt(it.Key()[len(prefix):])
	if err == nil {
		v, err = it.ValueAndErr()
	}
	if err == nil {
		e, err = decodeEvent(v, user, c)
	}
	return e, v, err
}

// iterMessage decodes the message under it, an iterator over the conversation's messages
// (keys prefix followed by int(seq)).
func iterMessage(it *pebble.Iterator, prefix []byte, convID string) (store.Message, error) {
	seq, _, err := readInt(it.Key()[len(prefix):])
	var v []byte
	if err == nil {
		v, err = it.ValueAndErr()
	}
	if err != nil {
		return store.Message{}, err
	}
	return decodeMessage(v, convID, seq)
}

// closeIter closes it, reporting its error (an I/O error met while iterating).
func closeIter(it *pebble.Iterator) error {
	if err := it.Close(); err != nil {
		return fmt.Errorf("%w: pebble: iterate: %w", store.ErrUnavailable, err)
	}
	return nil
}

// set writes key=val into the batch after recording what key held before: prev if
// existed, else nothing. Callers know the previous state because they read the key or
// because of a layout invariant (see keys.go).
// The writer's hot state (hotState) forgets the row key belongs to.
func (t *txn) set(key, val, prev []byte, existed bool) error {
	if t.hot != nil {
		t.hot.invalidate(key)
	}
	return t.write(key, val, prev, existed)
}

// setNew and setKnown are set for AppendMessage, which keeps the hot state right itself:
// setNew writes a key known to be absent, setKnown one known to hold prev.
func (t *txn) setNew(key, val []byte) error         { return t.write(key, val, nil, false) }
func (t *txn) setKnown(key, val, prev []byte) error { return t.write(key, val, prev, true) }

func (t *txn) write(key, val, prev []byte, existed bool) error {
	if t.b == nil {
		return errors.New("pebble: write in a read-only transaction")
	}
	t.undo.record(key, prev, existed)
	if err := t.b.Set(key, val, nil); err != nil {
		return fmt.Errorf("%w: pebble: write: %w", store.ErrUnavailable, err)
	}
	return nil
}

// del deletes key, which held prev, from the batch after recording prev; the hot state
// forgets the row key belongs to.
func (t *txn) del(key, prev []byte) error {
	if t.b == nil {
		return errors.New("pebble: write in a read-only transaction")
	}
	if t.hot != nil {
		t.hot.invalidate(key)
	}
	t.undo.record(key, prev, true)
	if err := t.b.Delete(key, nil); err != nil {
		return fmt.Errorf("%w: pebble: write: %w", store.ErrUnavailable, err)
	}
	return nil
}

func notFound(format string, args ...any) error {
	return fmt.Errorf("pebble: %s: %w", fmt.Sprintf(format, args...), store.ErrNotFound)
}

func exists(format string, args ...any) error {
	return fmt.Errorf("pebble: %s: %w", fmt.Sprintf(format, args...), store.ErrExists)
}

func corrupt(err error, format string, args ...any) error {
	return fmt.Errorf("%w: pebble: %s: %w", store.ErrUnavailable, fmt.Sprintf(format, args...), err)
}

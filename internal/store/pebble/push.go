package pebble

import (
	"context"
	"errors"

	"github.com/parleychat/parley/internal/store"
)

// PushTarget implements store.PushReader.
func (r readTx) PushTarget(ctx context.Context, userID, deviceID string) (store.PushTarget, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return store.PushTarget{}, err
	}
	p, found, err := t.pushTarget(userID, deviceID)
	if err == nil && !found {
		err = notFound("push target %q of user %q", deviceID, userID)
	}
	return p, err
}

// pushTarget reads the target (userID, deviceID); t.key and t.val are left holding its key
// and encoded row.
func (t *txn) pushTarget(userID, deviceID string) (store.PushTarget, bool, error) {
	t.key = pushTargetKey(t.key[:0], userID, deviceID)
	v, found, err := t.get(t.key)
	if err != nil || !found {
		return store.PushTarget{}, false, err
	}
	p, err := decodePushTarget(v, userID, deviceID)
	if err != nil {
		return store.PushTarget{}, false, corrupt(err, "push target %q of user %q", deviceID, userID)
	}
	return p, true, nil
}

// PushTargets implements store.PushReader.
func (r readTx) PushTargets(ctx context.Context, userID string) ([]store.PushTarget, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return nil, err
	}
	prefix := appendStr([]byte{tPushTarget}, userID)
	return scanPairs(t, prefix, prefixEnd(prefix), -1, decodePushTarget, "push targets of user %q", userID)
}

// PushTargetsAfter implements store.PushReader: a scan of the keys p from the one right
// after (afterUser, afterDevice)'s, which is that key followed by a zero byte.
func (r readTx) PushTargetsAfter(ctx context.Context, afterUser, afterDevice string, limit int) ([]store.PushTarget, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, nil
	}
	lower := append(pushTargetKey(nil, afterUser, afterDevice), 0)
	return scanPairs(t, lower, []byte{tPushTarget + 1}, limit, decodePushTarget,
		"push targets after %q/%q", afterUser, afterDevice)
}

// Mutes implements store.PushReader.
func (r readTx) Mutes(ctx context.Context, userID string) ([]store.Mute, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return nil, err
	}
	prefix := appendStr([]byte{tMute}, userID)
	return scanPairs(t, prefix, prefixEnd(prefix), -1, decodeMute, "mutes of user %q", userID)
}

// scanPairs decodes the rows of a table keyed by two strings (a table byte, enc(a),
// enc(b)) in [lower, upper), at most limit of them (all when limit < 0), in key order;
// format and args describe them in an error.
func scanPairs[T any](t *txn, lower, upper []byte, limit int, decode func(v []byte, a, b string) (T, error), format string, args ...any) ([]T, error) {
	it, err := t.iter(lower, upper)
	if err != nil {
		return nil, err
	}
	var out []T
	for valid := it.First(); valid && (limit < 0 || len(out) < limit); valid = it.Next() {
		a, rest, err := readStr(it.Key()[1:])
		var b string
		if err == nil {
			b, rest, err = readStr(rest)
		}
		if err == nil && len(rest) != 0 {
			err = errCorrupt
		}
		var v []byte
		if err == nil {
			v, err = it.ValueAndErr()
		}
		var row T
		if err == nil {
			row, err = decode(v, a, b)
		}
		if err != nil {
			return nil, errors.Join(corrupt(err, format, args...), it.Close())
		}
		out = append(out, row)
	}
	return out, closeIter(it)
}

// PutPushTarget implements store.PushWriter.
func (w writeTx) PutPushTarget(ctx context.Context, p store.PushTarget) error {
	t := w.t
	if err := t.check(ctx); err != nil {
		return err
	}
	t.key = pushTargetKey(t.key[:0], p.UserID, p.DeviceID)
	t.enc = encodePushTarget(t.enc[:0], p)
	return t.put(t.key, t.enc)
}

// DeletePushTarget implements store.PushWriter.
func (w writeTx) DeletePushTarget(ctx context.Context, userID, deviceID string) error {
	t := w.t
	if err := t.check(ctx); err != nil {
		return err
	}
	t.key = pushTargetKey(t.key[:0], userID, deviceID)
	return t.remove(t.key, "delete push target %q of user %q", deviceID, userID)
}

// AdvancePushCursor implements store.PushWriter. The single writer serializes it with
// every other write of the target, so reading the row and writing the larger cursor back
// is atomic.
func (w writeTx) AdvancePushCursor(ctx context.Context, userID, deviceID string, cursor int64) error {
	t := w.t
	if err := t.check(ctx); err != nil {
		return err
	}
	p, found, err := t.pushTarget(userID, deviceID)
	if err != nil {
		return err
	}
	if !found {
		return notFound("advance push cursor of device %q of user %q", deviceID, userID)
	}
	if cursor <= p.Cursor {
		return nil
	}
	p.Cursor = cursor
	t.enc = encodePushTarget(t.enc[:0], p)
	return t.set(t.key, t.enc, t.val, true) // t.key and t.val are still the target's
}

// PutMute implements store.PushWriter.
func (w writeTx) PutMute(ctx context.Context, m store.Mute) error {
	t := w.t
	if err := t.check(ctx); err != nil {
		return err
	}
	t.key = muteKey(t.key[:0], m.UserID, m.ConvID)
	t.enc = encodeMute(t.enc[:0], m)
	return t.put(t.key, t.enc)
}

// DeleteMute implements store.PushWriter.
func (w writeTx) DeleteMute(ctx context.Context, userID, convID string) error {
	t := w.t
	if err := t.check(ctx); err != nil {
		return err
	}
	t.key = muteKey(t.key[:0], userID, convID)
	return t.remove(t.key, "delete mute of conversation %q for user %q", convID, userID)
}

// put writes key=val, inserting or overwriting, after recording what key held.
func (t *txn) put(key, val []byte) error {
	prev, found, err := t.get(key)
	if err != nil {
		return err
	}
	return t.set(key, val, prev, found)
}

// remove deletes key after recording what it held, or returns ErrNotFound, described by
// format and args, when there is none.
func (t *txn) remove(key []byte, format string, args ...any) error {
	prev, found, err := t.get(key)
	if err != nil {
		return err
	}
	if !found {
		return notFound(format, args...)
	}
	return t.del(key, prev)
}

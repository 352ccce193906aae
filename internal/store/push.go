package store

import (
	"context"
	"errors"
	"fmt"
)

// Errors of RegisterPushTarget.
var (
	// ErrStaleGeneration: the registering token's generation is no longer the user's (the
	// user's tokens were revoked since it was checked).
	ErrStaleGeneration = errors.New("store: token generation is not the user's")
	// ErrTooManyTargets: the user has as many push targets as allowed.
	ErrTooManyTargets = errors.New("store: too many push targets")
)

// RegisterPushTarget writes a device's push registration in tx: the target t, registered
// with a token of generation gen, by a user allowed at most maxTargets targets. In the one
// transaction it
//   - refuses it with ErrStaleGeneration unless the user's TokenGen is still gen, so a
//     revocation (which raises the generation and removes every target in an Update of
//     its own) that committed first refuses it, and one that commits after removes it:
//     once the revocation has returned, no registration of an older token remains;
//   - refuses it with ErrTooManyTargets when the device has no target yet and the user
//     has maxTargets of them (replacing a device's target is not a new one);
//   - starts a new target at the user's last cursor (nothing from before it is pushed)
//     and keeps a replaced one's Cursor (what was pending goes to the new token).
//
// It returns the target as stored; ErrNotFound (wrapped) for an unknown user. Its checks
// hold against concurrent registrations and revocations because Updates are
// serializable: on PostgreSQL the read of the user locks its row, as a revocation's does.
func RegisterPushTarget(ctx context.Context, tx Tx, t PushTarget, gen int64, maxTargets int) (PushTarget, error) {
	u, err := tx.User(ctx, t.UserID)
	if err != nil {
		return t, err
	}
	if u.TokenGen != gen {
		return t, fmt.Errorf("%w: user %q is at generation %d, the token at %d", ErrStaleGeneration, t.UserID, u.TokenGen, gen)
	}
	old, err := tx.PushTarget(ctx, t.UserID, t.DeviceID)
	switch {
	case err == nil:
		t.Cursor = old.Cursor
	case errors.Is(err, ErrNotFound):
		ts, err := tx.PushTargets(ctx, t.UserID)
		if err != nil {
			return t, err
		}
		if len(ts) >= maxTargets {
			return t, fmt.Errorf("%w: user %q has %d, at most %d", ErrTooManyTargets, t.UserID, len(ts), maxTargets)
		}
		b, err := tx.Cursors(ctx, t.UserID)
		if err != nil {
			return t, err
		}
		t.Cursor = b.Last
	default:
		return t, err
	}
	return t, tx.PutPushTarget(ctx, t)
}

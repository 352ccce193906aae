package pebble

import (
	"context"
	"errors"

	"github.com/parleychat/parley/internal/store"
)

// User implements store.UserReader.
func (r readTx) User(ctx context.Context, id string) (store.User, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return store.User{}, err
	}
	t.key = userKey(t.key[:0], id)
	v, found, err := t.get(t.key)
	if err != nil {
		return store.User{}, err
	}
	if !found {
		return store.User{}, notFound("user %q", id)
	}
	u, err := decodeUser(v, id)
	if err != nil {
		return store.User{}, corrupt(err, "user %q", id)
	}
	return u, nil
}

// CreateUser implements store.UserWriter. It also creates the user's event log bounds.
func (w writeTx) CreateUser(ctx context.Context, u store.User) error {
	t := w.t
	if err := t.check(ctx); err != nil {
		return err
	}
	t.key = userKey(t.key[:0], u.ID)
	n := len(t.key)
	t.key = boundsKey(t.key, u.ID)
	uk, bk := t.key[:n], t.key[n:]
	if found, err := t.exists(uk); err != nil || found {
		if err == nil {
			err = exists("create user %q", u.ID)
		}
		return err
	}
	t.enc = encodeUser(t.enc[:0], u)
	if err := t.set(uk, t.enc, nil, false); err != nil {
		return err
	}
	t.enc = encodeBounds(t.enc[:0], store.CursorBounds{})
	return t.set(bk, t.enc, nil, false) // exists exactly when the user does
}

// SetTokenGen implements store.UserWriter.
func (w writeTx) SetTokenGen(ctx context.Context, id string, gen int64) error {
	return w.updateUser(ctx, id, "set token generation", func(u *store.User) { u.TokenGen = gen })
}

// SetPresenceHidden implements store.UserWriter.
func (w writeTx) SetPresenceHidden(ctx context.Context, id string, hidden bool) error {
	return w.updateUser(ctx, id, "set presence", func(u *store.User) { u.PresenceHidden = hidden })
}

// updateUser rewrites user id's record after change; what names the change in ErrNotFound.
func (w writeTx) updateUser(ctx context.Context, id, what string, change func(*store.User)) error {
	u, err := w.User(ctx, id)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return notFound("%s of user %q", what, id)
		}
		return err
	}
	t := w.t
	change(&u)
	t.enc = encodeUser(t.enc[:0], u)
	return t.set(t.key, t.enc, t.val, true) // t.key and t.val are still the user's
}

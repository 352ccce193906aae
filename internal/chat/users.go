package chat

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/parleychat/parley/internal/auth"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

const maxNameLen = 256

// CreateUser creates a user; created is false (and the existing user returned) if it exists.
func (s *Service) CreateUser(ctx context.Context, userID, name string) (u protocol.User, created bool, err error) {
	if !protocol.ValidUserID(userID) {
		return u, false, invalid("user_id must be 1-64 characters of [A-Za-z0-9_.@-]")
	}
	if len(name) > maxNameLen {
		return u, false, invalid("name longer than %d bytes", maxNameLen)
	}
	err = s.update(ctx, "create user", func(tx store.Tx, _ *outbox) error {
		err := tx.CreateUser(ctx, store.User{ID: userID, Name: name, CreatedAt: s.nowMS()})
		if errors.Is(err, store.ErrExists) {
			old, err := tx.User(ctx, userID)
			u = protocol.User{UserID: old.ID, Name: old.Name}
			return err
		}
		u, created = protocol.User{UserID: userID, Name: name}, true
		return err
	})
	return u, created, err
}

// IssueToken mints a token for (userID, deviceID). ttl 0 means the default. ErrNotFound for
// an unknown user.
func (s *Service) IssueToken(ctx context.Context, userID, deviceID string, ttl time.Duration) (protocol.Token, error) {
	switch {
	case !protocol.ValidUserID(userID):
		return protocol.Token{}, invalid("user_id must be 1-64 characters of [A-Za-z0-9_.@-]")
	case !protocol.ValidDeviceID(deviceID):
		return protocol.Token{}, invalid("device_id must be 1-64 characters of [A-Za-z0-9_.@-]")
	case ttl < 0:
		return protocol.Token{}, invalid("ttl_seconds must not be negative")
	case ttl == 0:
		ttl = s.cfg.DefaultTokenTTL
	}
	// The generation is read from the store, not the cache: on several nodes this node may
	// not have heard of a revocation made on another yet, and a token minted with the old
	// generation would be refused by the nodes that have.
	gen, err := s.storedGen(ctx, userID)
	if err != nil {
		return protocol.Token{}, err
	}
	exp := s.now().Add(ttl).UnixMilli()
	tok := s.signer.Mint(auth.Claims{UserID: userID, DeviceID: deviceID, Gen: gen, ExpiresAt: exp})
	return protocol.Token{Token: tok, ExpiresAt: exp}, nil
}

// tokenGen returns the user's current token generation: ErrNotFound for an unknown user.
func (s *Service) tokenGen(ctx context.Context, userID string) (int64, error) {
	if s.cluster != nil {
		s.expireGens()
	}
	if g, ok := s.gens.Load(userID); ok {
		return g.(int64), nil
	}
	return s.storedGen(ctx, userID)
}

// storedGen reads the user's token generation from the store and caches it, keeping a
// higher one if a revocation raced with the read. ErrNotFound for an unknown user.
func (s *Service) storedGen(ctx context.Context, userID string) (int64, error) {
	var gen int64
	err := s.view(ctx, "token generation", func(tx store.ReadTx) error {
		u, err := loadUser(ctx, tx, userID)
		gen = u.TokenGen
		return err
	})
	if err != nil {
		return 0, err
	}
	s.raiseGen(userID, gen)
	g, _ := s.gens.Load(userID)
	return g.(int64), nil
}

// Session is a verified token: the caller, and what CheckSession re-verifies while a
// long-lived connection acts on the token (its generation and expiry).
type Session struct {
	Identity
	ExpiresAt time.Time
	gen       int64
}

// Gen is the token generation of the session's token: a revocation ends the connections
// of tokens below the user's new generation (hub.KickBelow).
func (s Session) Gen() int64 { return s.gen }

// Authenticate verifies a user token: ErrUnauthorized when missing, malformed, forged,
// expired or revoked.
func (s *Service) Authenticate(ctx context.Context, token string) (Identity, error) {
	sess, err := s.OpenSession(ctx, token)
	return sess.Identity, err
}

// OpenSession is Authenticate for a caller that keeps acting on the token (a WebSocket):
// the Session it returns is re-verified by CheckSession without parsing the token again.
func (s *Service) OpenSession(ctx context.Context, token string) (Session, error) {
	if token == "" {
		return Session{}, fmt.Errorf("%w: missing token", ErrUnauthorized)
	}
	c, err := s.signer.Parse(token, s.nowMS())
	if err != nil {
		return Session{}, fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	sess := Session{Identity: Identity{UserID: c.UserID, DeviceID: c.DeviceID}, ExpiresAt: time.UnixMilli(c.ExpiresAt), gen: c.Gen}
	if _, err := s.CheckSession(ctx, sess); err != nil {
		return Session{}, err
	}
	return sess, nil
}

// CheckSession reports whether sess still holds, and for how long at most: ErrUnauthorized
// wrapping auth.ErrExpired once it expired, or auth.ErrRevoked once the user's tokens were
// revoked. It reads the cached generation, so it is cheap enough to run before every frame.
// On one of several nodes the duration is at most genTTL: a revocation on another node
// whose bus message this one missed is seen when the cached generation is read again.
func (s *Service) CheckSession(ctx context.Context, sess Session) (time.Duration, error) {
	left := sess.ExpiresAt.Sub(s.now())
	if left <= 0 {
		return 0, fmt.Errorf("%w: %w", ErrUnauthorized, auth.ErrExpired)
	}
	gen, err := s.tokenGen(ctx, sess.UserID)
	if err == nil && sess.gen > gen {
		// A token newer than the generation this node knows: minted after a revocation
		// (on another node) that has not reached this one yet. The store knows.
		gen, err = s.storedGen(ctx, sess.UserID)
	}
	switch {
	case errors.Is(err, ErrNotFound):
		return 0, fmt.Errorf("%w: unknown user", ErrUnauthorized)
	case err != nil:
		return 0, err
	case gen != sess.gen:
		return 0, fmt.Errorf("%w: %w", ErrUnauthorized, auth.ErrRevoked)
	}
	if s.cluster != nil {
		left = min(left, genTTL) // look again once the generation may have been revoked elsewhere
	}
	return left, nil
}

// RevokeTokens invalidates every token of userID issued so far and ends the user's hub
// subscriptions (the gateway then closes their connections). ErrNotFound for an unknown user.
func (s *Service) RevokeTokens(ctx context.Context, userID string) error {
	if !protocol.ValidUserID(userID) {
		return invalid("user_id must be 1-64 characters of [A-Za-z0-9_.@-]")
	}
	var gen int64
	err := s.update(ctx, "revoke tokens", func(tx store.Tx, _ *outbox) error {
		u, err := loadUser(ctx, tx, userID)
		if err != nil {
			return err
		}
		gen = u.TokenGen + 1
		if err := tx.SetTokenGen(ctx, userID, gen); err != nil {
			return err
		}
		return removeAllPush(ctx, tx, userID) // a revoked device must not be notified
	})
	if err != nil {
		return err
	}
	s.reloadPush(ctx, userID)
	s.raiseGen(userID, gen)
	s.hub.Kick(userID)
	if s.cluster != nil {
		s.cluster.Revoke(userID, gen)
	}
	return nil
}

// raiseGen caches gen as userID's token generation unless a higher one is cached: two
// reads of the store, or a read and a revocation here, may end in either order. Only
// generations from the store are cached, never one a bus message names (elsewhere.Revoked).
func (s *Service) raiseGen(userID string, gen int64) {
	for {
		old, loaded := s.gens.LoadOrStore(userID, gen)
		if !loaded || old.(int64) >= gen || s.gens.CompareAndSwap(userID, old, gen) {
			return
		}
	}
}

// Me returns who the caller's token speaks for, with the user's name: a client that was
// handed only a token learns its own identity from it.
func (s *Service) Me(ctx context.Context, me Identity) (protocol.Me, error) {
	if !protocol.ValidUserID(me.UserID) {
		return protocol.Me{}, invalid("user_id is malformed")
	}
	var out protocol.Me
	err := s.view(ctx, "get me", func(tx store.ReadTx) error {
		u, err := loadUser(ctx, tx, me.UserID)
		out = protocol.Me{UserID: u.ID, DeviceID: me.DeviceID, Name: u.Name, Presence: protocol.PresenceVisible}
		if u.PresenceHidden {
			out.Presence = protocol.PresenceHidden
		}
		return err
	})
	return out, err
}

// User returns any user's public profile (id and name): ErrNotFound for an unknown user.
// Any authenticated caller may look any user up, as they may already name any user as a
// peer or a member.
func (s *Service) User(ctx context.Context, userID string) (protocol.User, error) {
	if !protocol.ValidUserID(userID) {
		return protocol.User{}, invalid("user_id is malformed")
	}
	var out protocol.User
	err := s.view(ctx, "get user", func(tx store.ReadTx) error {
		u, err := loadUser(ctx, tx, userID)
		out = protocol.User{UserID: u.ID, Name: u.Name}
		return err
	})
	return out, err
}

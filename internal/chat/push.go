package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"unicode/utf8"

	"github.com/parleychat/parley/internal/auth"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// Pusher is the offline push (package push) as the chat rules see it.
type Pusher interface {
	// Notify tells it that the user's log has events up to cursor.
	Notify(userID string, cursor int64)
	// Reload makes it read the user's push targets again, after they changed.
	Reload(ctx context.Context, userID string) error
	// Check reports why a registration cannot be pushed to (its provider is not configured,
	// a Web Push endpoint is refused), or nil.
	Check(provider, token string) error
}

// SetPusher connects the offline push: committed events are announced to it and push
// registrations are checked by it. Call it once, before the Service is used; without it
// registrations are refused and nothing is pushed.
func (s *Service) SetPusher(p Pusher) { s.pusher = p }

// notifyPush announces a user's newest cursor to the pusher.
func (s *Service) notifyPush(userID string, cursor int64) {
	if s.pusher != nil {
		s.pusher.Notify(userID, cursor)
	}
}

// RegisterPush registers, or replaces, the calling device's push target. A new target
// starts at the user's latest cursor: nothing from before the registration is pushed. A
// replaced one keeps its cursor, so that what was pending goes to the new token. The
// write checks, in its transaction, that sess's token is not revoked (a registration that
// races a revocation is refused, or removed by it) and that the user stays within
// Config.MaxPushDevices (ErrConflict past it).
func (s *Service) RegisterPush(ctx context.Context, sess Session, req protocol.PushRegisterRequest) (protocol.PushDevice, error) {
	me := sess.Identity
	t, err := s.pushTarget(me, req)
	if err != nil {
		return protocol.PushDevice{}, err
	}
	err = s.update(ctx, "register push", func(tx store.Tx, _ *outbox) error {
		stored, err := store.RegisterPushTarget(ctx, tx, t, sess.gen, s.cfg.MaxPushDevices)
		switch {
		case errors.Is(err, store.ErrStaleGeneration):
			return fmt.Errorf("%w: %w", ErrUnauthorized, auth.ErrRevoked)
		case errors.Is(err, store.ErrNotFound):
			return fmt.Errorf("%w: unknown user", ErrUnauthorized)
		case errors.Is(err, store.ErrTooManyTargets):
			return fmt.Errorf("%w: this user has %d devices registered for push, the most allowed: "+
				"remove one (DELETE /v1/push/devices/{device_id}) before registering another", ErrConflict, s.cfg.MaxPushDevices)
		}
		t = stored
		return err
	})
	if err != nil {
		return protocol.PushDevice{}, err
	}
	s.reloadPush(ctx, me.UserID)
	return pushDeviceOf(t), nil
}

// pushTarget checks a registration and returns it as a target.
func (s *Service) pushTarget(me Identity, req protocol.PushRegisterRequest) (store.PushTarget, error) {
	// Topic is not taken: the APNs topic is the server's (--apns-topic). A client's is
	// accepted for the clients that still send one, and ignored.
	t := store.PushTarget{UserID: me.UserID, DeviceID: me.DeviceID, Provider: req.Provider,
		Locale: req.Locale, RegisteredAt: s.nowMS()}
	switch req.Provider {
	case protocol.PushAPNs, protocol.PushFCM:
		if req.Token == "" || len(req.Subscription) > 0 {
			return t, invalid("provider %s takes a token and no subscription", req.Provider)
		}
		t.Token = req.Token
	case protocol.PushWebPush:
		if req.Token != "" || len(req.Subscription) == 0 {
			return t, invalid("provider webpush takes a subscription and no token")
		}
		sub, err := webPushSubscription(req.Subscription)
		if err != nil {
			return t, err
		}
		t.Token = sub
	default:
		return t, invalid("provider must be apns, fcm or webpush")
	}
	switch {
	case len(t.Token) > protocol.MaxPushTokenLen:
		return t, invalid("token is longer than %d bytes", protocol.MaxPushTokenLen)
	case req.Provider != protocol.PushAPNs && req.Topic != "":
		return t, invalid("topic is only for provider apns")
	case len(req.Locale) > protocol.MaxPushLocaleLen || !printable(req.Locale):
		return t, invalid("locale must be at most %d printable characters", protocol.MaxPushLocaleLen)
	case !printable(t.Token):
		return t, invalid("token must be printable characters")
	}
	if s.pusher == nil {
		return t, invalid("push notifications are not enabled on this server")
	}
	if err := s.pusher.Check(t.Provider, t.Token); err != nil {
		return t, invalid("%v", err)
	}
	return t, nil
}

// webPushSubscription checks a browser's PushSubscription JSON and returns it in the form
// the Web Push provider takes: {"endpoint", "keys": {"p256dh", "auth"}}.
func webPushSubscription(raw json.RawMessage) (string, error) {
	var sub struct {
		Endpoint string `json:"endpoint"`
		Keys     struct {
			P256dh string `json:"p256dh"`
			Auth   string `json:"auth"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(raw, &sub); err != nil {
		return "", invalid("subscription must be a PushSubscription's JSON: %v", err)
	}
	if sub.Endpoint == "" || sub.Keys.P256dh == "" || sub.Keys.Auth == "" {
		return "", invalid("subscription needs endpoint, keys.p256dh and keys.auth")
	}
	if _, err := url.Parse(sub.Endpoint); err != nil {
		return "", invalid("subscription endpoint is not a URL")
	}
	b, err := json.Marshal(sub)
	return string(b), err
}

// printable reports whether s is UTF-8 without control characters.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// pushDeviceOf shows a target without most of its token.
func pushDeviceOf(t store.PushTarget) protocol.PushDevice {
	tok := t.Token
	if t.Provider == protocol.PushWebPush {
		var sub struct {
			Endpoint string `json:"endpoint"`
		}
		_ = json.Unmarshal([]byte(tok), &sub)
		if u, err := url.Parse(sub.Endpoint); err == nil {
			tok = u.Scheme + "://" + u.Host
		}
	} else if r := []rune(tok); len(r) > 8 {
		tok = "…" + string(r[len(r)-8:])
	}
	return protocol.PushDevice{DeviceID: t.DeviceID, Provider: t.Provider, Token: tok, Topic: t.Topic,
		Locale: t.Locale, RegisteredAt: t.RegisteredAt}
}

// PushDevices lists the caller's user's registered devices.
func (s *Service) PushDevices(ctx context.Context, me Identity) (protocol.PushDevices, error) {
	out := protocol.PushDevices{Devices: []protocol.PushDevice{}}
	err := s.view(ctx, "push devices", func(tx store.ReadTx) error {
		ts, err := tx.PushTargets(ctx, me.UserID)
		for _, t := range ts {
			out.Devices = append(out.Devices, pushDeviceOf(t))
		}
		return err
	})
	return out, err
}

// RemovePush removes the push target of one of the caller's user's devices (deviceID ""
// is the calling device). Removing one that is not registered is a 404.
func (s *Service) RemovePush(ctx context.Context, me Identity, deviceID string) error {
	if deviceID == "" {
		deviceID = me.DeviceID
	}
	if !protocol.ValidDeviceID(deviceID) {
		return invalid("device_id must be 1-64 characters of [A-Za-z0-9_.@-]")
	}
	err := s.update(ctx, "remove push", func(tx store.Tx, _ *outbox) error {
		err := tx.DeletePushTarget(ctx, me.UserID, deviceID)
		if errors.Is(err, store.ErrNotFound) {
			return notFound("device %s has no push registration", deviceID)
		}
		return err
	})
	if err == nil {
		s.reloadPush(ctx, me.UserID)
	}
	return err
}

// removeAllPush deletes every push target of the user, inside a revocation: a revoked
// device must not be notified.
func removeAllPush(ctx context.Context, tx store.Tx, userID string) error {
	ts, err := tx.PushTargets(ctx, userID)
	if err != nil {
		return err
	}
	for _, t := range ts {
		if err := tx.DeletePushTarget(ctx, userID, t.DeviceID); err != nil {
			return err
		}
	}
	return nil
}

// reloadPush tells the pusher the user's targets changed. A failure is logged: the
// pusher's periodic sweep reads them again.
func (s *Service) reloadPush(ctx context.Context, userID string) {
	if s.pusher == nil {
		return
	}
	if err := s.pusher.Reload(ctx, userID); err != nil {
		s.log.Warn("push: reload targets", "user", userID, "err", err)
	}
}

// Mute silences the conversation's pushes for the caller until until (Unix ms;
// protocol.MuteForever for ever), on all their devices. A time in the past unmutes.
func (s *Service) Mute(ctx context.Context, me Identity, convID string, until int64) (protocol.MuteState, error) {
	if until <= s.nowMS() {
		return s.Unmute(ctx, me, convID)
	}
	until = min(until, protocol.MuteForever)
	err := s.update(ctx, "mute", func(tx store.Tx, _ *outbox) error {
		if _, _, err := loadConvMember(ctx, tx, convID, me.UserID); err != nil {
			return err
		}
		return tx.PutMute(ctx, store.Mute{UserID: me.UserID, ConvID: convID, Until: until})
	})
	return protocol.MuteState{ConvID: convID, MutedUntil: until}, err
}

// Unmute lets the conversation push again. Unmuting a conversation that is not muted
// changes nothing and is not an error.
func (s *Service) Unmute(ctx context.Context, me Identity, convID string) (protocol.MuteState, error) {
	err := s.update(ctx, "unmute", func(tx store.Tx, _ *outbox) error {
		if _, _, err := loadConvMember(ctx, tx, convID, me.UserID); err != nil {
			return err
		}
		if err := tx.DeleteMute(ctx, me.UserID, convID); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		return nil
	})
	return protocol.MuteState{ConvID: convID}, err
}

// MuteState returns whether the caller muted the conversation.
func (s *Service) MuteState(ctx context.Context, me Identity, convID string) (protocol.MuteState, error) {
	out := protocol.MuteState{ConvID: convID}
	err := s.view(ctx, "mute state", func(tx store.ReadTx) error {
		if _, _, err := loadConvMember(ctx, tx, convID, me.UserID); err != nil {
			return err
		}
		ms, err := tx.Mutes(ctx, me.UserID)
		if i := slices.IndexFunc(ms, func(m store.Mute) bool { return m.ConvID == convID }); i >= 0 && ms[i].Until > s.nowMS() {
			out.MutedUntil = ms[i].Until
		}
		return err
	})
	return out, err
}

// Badge is the user's unread total over the conversations of their list that are not
// muted: the number an app shows on its icon.
func (s *Service) Badge(ctx context.Context, userID string) (int, error) {
	var n int
	err := s.view(ctx, "badge", func(tx store.ReadTx) error {
		mutes, err := tx.Mutes(ctx, userID)
		if err != nil {
			return err
		}
		now := s.nowMS()
		muted := make(map[string]bool, len(mutes))
		for _, m := range mutes {
			muted[m.ConvID] = m.Until > now
		}
		n, err = s.BadgeIn(ctx, tx, userID, muted)
		return err
	})
	return n, err
}

// BadgeIn is Badge read in tx, with the user's muted conversations already known: the
// pusher reads it in the transaction that reads the user's log.
func (s *Service) BadgeIn(ctx context.Context, tx store.ReadTx, userID string, muted map[string]bool) (int, error) {
	var n int64
	ms, err := visibleMemberships(ctx, tx, userID, pageKey{})
	for _, m := range ms {
		if !muted[m.ConvID] {
			n += max(unreadOf(m.Conversation, m.Member), 0)
		}
	}
	return int(min(n, 1<<31-1)), err
}

// Name returns the user's display name.
func (s *Service) Name(ctx context.Context, userID string) (string, error) {
	var name string
	err := s.view(ctx, "name", func(tx store.ReadTx) error {
		u, err := loadUser(ctx, tx, userID)
		name = u.Name
		return err
	})
	return name, err
}

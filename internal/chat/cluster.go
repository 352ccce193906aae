package chat

import (
	"context"
	"errors"
	"time"

	"github.com/parleychat/parley/internal/live"
	"github.com/parleychat/parley/internal/store"
)

// This file is chat's side of live.Cluster, which links this node to the other nodes on one
// store through a bus: what chat answers when the cluster checks a bus message against the
// store (live.Conversations), and what chat does with the changes and revocations other
// nodes announce (live.Changes, live.Revocations). The cluster carries; chat keeps the
// rules of what they mean.

// elsewhere is what the Service does with what other nodes tell this node. It is a type of
// its own so that its methods, which only the cluster calls, stay off the Service's API.
type elsewhere struct{ s *Service }

var (
	_ live.Conversations = elsewhere{}
	_ live.Changes       = elsewhere{}
	_ live.Revocations   = elsewhere{}
)

// genTTL bounds how long a node trusts a cached token generation when it is one of several:
// a revocation whose message it missed takes effect there within genTTL. The store's
// generation stays the authority.
const genTTL = 30 * time.Second

// perMemberCheck is the most followers NotMembers looks up one by one; a room with more has
// the conversation's members read at once.
const perMemberCheck = 32

// NotMembers implements live.Conversations: those of users no longer members of convID.
func (e elsewhere) NotMembers(ctx context.Context, convID string, users []string) ([]string, error) {
	var gone []string
	err := e.s.view(ctx, "check room", func(tx store.ReadTx) error {
		gone = gone[:0]
		if len(users) > perMemberCheck {
			ms, err := tx.Members(ctx, convID)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			in := make(map[string]bool, len(ms))
			for _, m := range ms {
				in[m.UserID] = true
			}
			for _, u := range users {
				if !in[u] {
					gone = append(gone, u)
				}
			}
			return nil
		}
		for _, u := range users {
			if _, err := tx.Member(ctx, convID, u); errors.Is(err, store.ErrNotFound) {
				gone = append(gone, u)
			} else if err != nil {
				return err
			}
		}
		return nil
	})
	return gone, err
}

// MaxSeq implements live.Conversations: convID's newest seq in the store.
func (e elsewhere) MaxSeq(ctx context.Context, convID string) (int64, error) {
	var maxSeq int64
	err := e.s.view(ctx, "check a room message", func(tx store.ReadTx) error {
		conv, err := loadConv(ctx, tx, convID)
		maxSeq = conv.MaxSeq
		return err
	})
	return maxSeq, err
}

// PositionsRaised implements live.Changes.
func (e elsewhere) PositionsRaised(convID, userID string, read, delivered int64) {
	e.s.raisedElsewhere(convID, userID, read, delivered)
}

// MembersChanged implements live.Changes: counts built before the change are dropped.
func (e elsewhere) MembersChanged(convID string) {
	e.s.counts.ForgetSoon(convID)
	e.s.countsChanged(convID) // its next receipts push forgets the senders who left
}

// Recalled implements live.Changes: the recent messages held may hold the recalled one.
func (e elsewhere) Recalled(convID string) { e.s.recent.Drop(convID) }

// Revoked implements live.Revocations. It takes a revocation from another node as a hint:
// the user's token generation is read from the store, and only the connections whose
// tokens are older than that one are closed. A revocation that names a generation this
// node already knows needs no read. The generation in the message is never believed: a
// forged one, however high, neither closes a connection nor refuses a token the store
// still honours.
func (e elsewhere) Revoked(userID string, gen int64) {
	s := e.s
	if g, ok := s.gens.Load(userID); ok && g.(int64) >= gen {
		s.hub.KickBelow(userID, g.(int64)) // known already, from the store: no read
		return
	}
	ctx, cancel := context.WithTimeout(s.bg.Context(), revokeReadTimeout)
	defer cancel()
	stored, err := s.storedGen(ctx, userID)
	if err != nil {
		if !errors.Is(err, ErrNotFound) {
			// The store did not answer: connections re-check their tokens within genTTL.
			s.log.Warn("bus: read the token generation of a revocation", "user", userID, "err", err)
		}
		return
	}
	s.hub.KickBelow(userID, stored)
}

// revokeReadTimeout bounds Revoked's read of the store, on the bus's delivery goroutine.
const revokeReadTimeout = 5 * time.Second

// expireGens clears the token generations cached once they are genTTL old, so that a
// revocation whose message this node missed takes effect here within genTTL.
func (s *Service) expireGens() {
	now, last := time.Now().UnixNano(), s.gensCleared.Load()
	if now-last >= int64(genTTL) && s.gensCleared.CompareAndSwap(last, now) {
		s.gens.Clear()
	}
}

// BusState reports the bus for /healthz: "none" without one (a single node), "ok" while it
// carries messages, and "down" while it cannot (NATS unreachable: the node keeps serving,
// and its readers catch up by sync).
func (s *Service) BusState() string {
	if s.cluster == nil {
		return "none"
	}
	if s.cluster.Healthy() != nil {
		return "down"
	}
	return "ok"
}

// DeviceConnected tells the other nodes that a WebSocket connection of me's device opened
// at since (Unix nanoseconds), so that they close the device's older connections (the
// gateway closes those of this node itself). Without a bus it does nothing.
func (s *Service) DeviceConnected(me Identity, since int64) {
	if s.cluster != nil {
		s.cluster.DeviceConnected(me.UserID, me.DeviceID, since)
	}
}

// AwaitSubscriptions returns once the bus subscriptions this node made so far (for the hub
// subscriptions, rooms and watches just made) reach the bus's server, so that what other
// nodes commit after it returns wakes them. Without a bus, or on one that subscribes
// synchronously (bus.Memory), it returns at once. A bus that does not answer within a
// second is not waited for: its wake-ups are lost until it is back, and readers catch up
// by their next sync.
func (s *Service) AwaitSubscriptions() {
	if s.cluster != nil {
		s.cluster.Flush()
	}
}

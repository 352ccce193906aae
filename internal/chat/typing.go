package chat

import (
	"context"
	"time"

	"github.com/parleychat/parley/internal/hub"
	"github.com/parleychat/parley/internal/live"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// Typing tells the other members of convID that me started (on) or stopped typing there
// (docs/protocol.md section 9.10). Nothing is stored. In a write-fanout conversation each
// other member's connections, on every node, get a TypingPush at once (me's own devices
// do not); in a read-fanout one the rooms on every node that has one push the set of
// typers to the connections that have the conversation open, at most once a second. It
// answers errNoConversation (404) to a non-member, as every other call does, whatever
// allow says. allow, if not nil, is the caller's rate limit (a TypingLimiter's), asked
// once membership is known: when it refuses, nothing is sent and forwarded is false.
func (s *Service) Typing(ctx context.Context, me Identity, convID string, on bool, allow func() bool) (forwarded bool, err error) {
	var members []store.Member
	var readFanout bool
	err = s.view(ctx, "typing", func(tx store.ReadTx) error {
		c, _, err := loadConvMember(ctx, tx, convID, me.UserID)
		if err != nil {
			return err
		}
		if forwarded = allow == nil || allow(); !forwarded {
			return nil
		}
		if readFanout = c.ReadFanout(); readFanout {
			return nil
		}
		members, err = tx.Members(ctx, convID)
		return err
	})
	if err != nil || !forwarded {
		return false, err
	}
	if readFanout {
		s.hub.Typing(convID, me.UserID, on)
		if s.cluster != nil {
			s.cluster.RoomTyping(convID, me.UserID, on)
		}
		return true, nil
	}
	b, ok := live.TypingBody(convID, me.UserID, on)
	if !ok {
		return false, nil
	}
	for _, m := range members {
		if m.UserID == me.UserID {
			continue
		}
		s.hub.Publish(m.UserID, []hub.Event{{Body: b}})
		if s.cluster != nil {
			s.cluster.Typing(m.UserID, convID, me.UserID, on)
		}
	}
	return true, nil
}

// TypingLimiter is one device's rate limit of typing: at most one "started" per
// conversation every TypingEvery is forwarded, and a "stopped" only after a forwarded
// "started" (always, then), so that a client that types on, or floods, costs its peers at
// most one push per TypingEvery. Its methods are not safe for concurrent use: a
// WebSocket connection (one per device) holds one, used by its reader.
type TypingLimiter struct {
	last map[string]typingSpell // conversation -> its last "started" forwarded
}

type typingSpell struct {
	at     time.Time // the "started" forwarded last
	typing bool      // no "stopped" forwarded since
}

// TypingEvery is the least time between two "started" of a device in a conversation
// that are forwarded.
const TypingEvery = protocol.TypingEveryMS * time.Millisecond

// maxTypingSpells bounds what a TypingLimiter keeps: past it, spells older than
// hub.TypingExpiry are forgotten (they limit nothing any more).
const maxTypingSpells = 64

// Allow reports whether a "started" (on) or "stopped" of convID at now is forwarded,
// and records it if it is.
func (l *TypingLimiter) Allow(convID string, on bool, now time.Time) bool {
	sp, ok := l.last[convID]
	if !on {
		if !ok || !sp.typing || now.Sub(sp.at) >= hub.TypingExpiry {
			return false // nothing to stop: the peers have no "started" standing
		}
		sp.typing = false
		l.last[convID] = sp
		return true
	}
	if ok && now.Sub(sp.at) < TypingEvery && now.Sub(sp.at) >= 0 {
		return false
	}
	if l.last == nil {
		l.last = make(map[string]typingSpell)
	}
	if len(l.last) >= maxTypingSpells {
		for id, sp := range l.last {
			if now.Sub(sp.at) >= hub.TypingExpiry {
				delete(l.last, id)
			}
		}
	}
	l.last[convID] = typingSpell{at: now, typing: true}
	return true
}

// Standing returns the conversations whose last forwarded "started" still holds at now
// and was not stopped: those a closing connection stops.
func (l *TypingLimiter) Standing(now time.Time) []string {
	var out []string
	for id, sp := range l.last {
		if sp.typing && now.Sub(sp.at) < hub.TypingExpiry {
			out = append(out, id)
		}
	}
	return out
}

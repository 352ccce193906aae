package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/parleychat/parley/internal/hub"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// outbox collects the sync events a transaction appends, so that they are published to the
// hub only after the transaction committed, in cursor order per user.
type outbox struct {
	order  []string // users in first-append order
	events map[string][]hub.Event
}

// append stores ev in userID's log inside tx and queues it for publication with body, which
// the events of one fanout share (hub.Body).
func (o *outbox) append(ctx context.Context, tx store.Tx, ev store.Event, body *hub.Body) error {
	cursor, err := tx.AppendEvent(ctx, ev)
	if err != nil {
		return fmt.Errorf("append %s event for %s: %w", ev.Type, ev.UserID, err)
	}
	o.add(ev.UserID, hub.Event{Cursor: cursor, Body: body})
	return nil
}

// add queues an event the store has appended to userID's log.
func (o *outbox) add(userID string, ev hub.Event) {
	if o.events == nil {
		o.events = make(map[string][]hub.Event)
	}
	if _, ok := o.events[userID]; !ok {
		o.order = append(o.order, userID)
	}
	o.events[userID] = append(o.events[userID], ev)
}

// appendData stores an event whose payload is data itself (every type but "message").
func (o *outbox) appendData(ctx context.Context, tx store.Tx, userID, typ, convID string, ts int64, data any) error {
	return o.appendDataTo(ctx, tx, []string{userID}, typ, convID, ts, data)
}

// appendDataTo stores the same event in the log of each of users. data is encoded once, and
// the events share one hub.Body, so that their push frame is encoded once too.
func (o *outbox) appendDataTo(ctx context.Context, tx store.Tx, users []string, typ, convID string, ts int64, data any) error {
	raw, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("encode %s event: %w", typ, err)
	}
	body := &hub.Body{Type: typ, ConvID: convID, TS: ts, Data: raw}
	for _, u := range users {
		if err := o.append(ctx, tx, store.Event{UserID: u, Type: typ, ConvID: convID, TS: ts, Data: raw}, body); err != nil {
			return err
		}
	}
	return nil
}

func (o *outbox) count() int {
	n := 0
	for _, evs := range o.events {
		n += len(evs)
	}
	return n
}

// domainErrors are the sentinels a Service method may return as they are.
var domainErrors = []error{ErrInvalid, ErrUnauthorized, ErrForbidden, ErrNotFound, ErrConflict, ErrGone, ErrTooLarge, ErrQuota, ErrUnavailable}

// isDomain reports whether err already wraps a domain sentinel.
func isDomain(err error) bool {
	for _, d := range domainErrors {
		if errors.Is(err, d) {
			return true
		}
	}
	return false
}

// storeErr turns an error that escaped from the store into ErrUnavailable (503: nothing was
// persisted, the client retries), logging it because it is not the client's fault.
func (s *Service) storeErr(op string, err error) error {
	if err == nil || isDomain(err) {
		return err
	}
	if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		s.log.Error("store failure", "op", op, "err", err)
	}
	return fmt.Errorf("%w: %s: %v", ErrUnavailable, op, err)
}

// update runs fn in a store transaction and, once it committed, publishes the events fn
// appended through ob.
func (s *Service) update(ctx context.Context, op string, fn func(tx store.Tx, ob *outbox) error) error {
	var ob outbox
	err := s.st.Update(ctx, func(tx store.Tx) error {
		ob = outbox{} // fn runs once, but never publish a discarded attempt's events
		return fn(tx, &ob)
	})
	if err := s.wrote(ctx, op, err); err != nil {
		return err
	}
	s.publish(ctx, &ob)
	return nil
}

// wrote records the outcome err of a store write for Healthy and turns a store failure
// into ErrUnavailable.
func (s *Service) wrote(ctx context.Context, op string, err error) error {
	if err != nil {
		if !isDomain(err) && ctx.Err() == nil {
			s.writeFailed(err)
		}
		return s.storeErr(op, err)
	}
	s.writeSucceeded()
	return nil
}

type eventCountKey struct{}

// WithEventCount returns a context under which the Service counts the sync events that the
// calls made with it committed; EventsCounted reads the count. The gateway weighs its rate
// limits by it: one rename of a large group is hundreds of events, a direct send two.
func WithEventCount(ctx context.Context) context.Context {
	return context.WithValue(ctx, eventCountKey{}, new(atomic.Int64))
}

// EventsCounted returns the events committed so far by calls made with ctx, a context from
// WithEventCount (0 for any other).
func EventsCounted(ctx context.Context) int {
	if n, ok := ctx.Value(eventCountKey{}).(*atomic.Int64); ok {
		return int(n.Load())
	}
	return 0
}

// writeFailed records a store write failure for Healthy.
func (s *Service) writeFailed(err error) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.writeErr = err
}

// writeSucceeded clears a recorded write failure, but only when the disk has room again
// (Options.Room): on a full disk a small write may still fit, and the next send fail.
func (s *Service) writeSucceeded() {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if s.writeErr != nil && s.room() == nil {
		s.writeErr = nil
	}
}

// Healthy reports whether the store answers reads and writes succeed: a server whose disk
// is full still accepts connections, but should not be reported as healthy while every
// send gets 503. Once a write has failed, Healthy reports that failure until a later write
// succeeds with room on the disk (see Options.Room); with room, it tries one itself (a
// transaction that writes nothing), so a node recovers from a lost database on its own.
func (s *Service) Healthy(ctx context.Context) error {
	s.writeMu.Lock()
	failed := s.writeErr
	s.writeMu.Unlock()
	if failed != nil && s.room() == nil {
		// Probe with a write of nothing, so that a node whose database came back reports
		// healthy by itself: a load balancer that stopped sending it traffic because of
		// this check would otherwise never see a write succeed.
		probe := s.st.Update(ctx, func(tx store.Tx) error {
			_, err := tx.Conversation(ctx, "")
			if errors.Is(err, store.ErrNotFound) {
				return nil
			}
			return err
		})
		if probe == nil {
			s.writeSucceeded()
			failed = nil
		}
	}
	if failed != nil {
		return fmt.Errorf("%w: the last write failed and no write has succeeded since with room on the disk: %v", ErrUnavailable, failed)
	}
	return s.view(ctx, "health", func(tx store.ReadTx) error {
		_, err := tx.Conversation(ctx, "") // no such row: a cheap round trip
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		return err
	})
}

// publish hands the committed events of ob to the hub and counts them (see WithEventCount).
func (s *Service) publish(ctx context.Context, ob *outbox) {
	for _, u := range ob.order {
		evs := ob.events[u]
		s.hub.Publish(u, evs)
		if s.cluster != nil {
			s.cluster.Wake(u, evs[len(evs)-1].Cursor) // the newest: the others read up to it
		}
		s.notifyPush(u, evs[len(evs)-1].Cursor)
	}
	s.published(ctx, ob.count())
}

// published counts n events handed to the hub (see WithEventCount).
func (s *Service) published(ctx context.Context, n int) {
	if n > 0 {
		s.obs.EventsCommitted(n)
	}
	countEvents(ctx, n)
}

// countEvents adds n to the count of ctx, if it is from WithEventCount.
func countEvents(ctx context.Context, n int) {
	if c, ok := ctx.Value(eventCountKey{}).(*atomic.Int64); ok {
		c.Add(int64(n))
	}
}

// view runs fn in a read-only snapshot.
func (s *Service) view(ctx context.Context, op string, fn func(tx store.ReadTx) error) error {
	return s.storeErr(op, s.st.View(ctx, fn))
}

// errNoConversation is the answer for a conversation that does not exist and, word for word,
// for one the caller is not a member of: a stranger must not learn whether two users talk
// (or a group exists) from the difference. It echoes no id, so the two answers are
// byte-identical.
var errNoConversation = fmt.Errorf("%w: no such conversation (or you are not a member)", ErrNotFound)

// loadConv returns the conversation or errNoConversation.
func loadConv(ctx context.Context, tx store.ReadTx, convID string) (store.Conversation, error) {
	c, err := tx.Conversation(ctx, convID)
	if errors.Is(err, store.ErrNotFound) {
		return c, errNoConversation
	}
	return c, err
}

// loadMember returns the user's membership, or errNoConversation for a non-member.
func loadMember(ctx context.Context, tx store.ReadTx, convID, userID string) (store.Member, error) {
	m, err := tx.Member(ctx, convID, userID)
	if errors.Is(err, store.ErrNotFound) {
		return m, errNoConversation
	}
	return m, err
}

// loadConvMember returns the conversation and the user's membership; a missing conversation
// and a non-member get the same errNoConversation.
func loadConvMember(ctx context.Context, tx store.ReadTx, convID, userID string) (store.Conversation, store.Member, error) {
	if !protocol.ValidConvID(convID) {
		return store.Conversation{}, store.Member{}, fmt.Errorf("%w: malformed conv_id", ErrInvalid)
	}
	c, err := loadConv(ctx, tx, convID)
	if err != nil {
		return c, store.Member{}, err
	}
	m, err := loadMember(ctx, tx, convID, userID)
	return c, m, err
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

func notFound(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrNotFound}, args...)...)
}

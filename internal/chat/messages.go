package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/parleychat/parley/internal/hub"
	"github.com/parleychat/parley/internal/live"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// Send stores a message durably with its seq and one "message" event in every member's log,
// all in one step of the store (store.Store.AppendMessage, which assigns the seq and the
// cursors), and returns the ack. A repeated (sender, client_msg_id) creates nothing and
// returns the original ack with Duplicate set, whatever its content, if it names the same
// conversation; naming another one is ErrConflict (see duplicateAck). Sending advances the
// sender's read (and delivered) position to the new seq without an event of its own, and
// makes the conversation visible again to members who had deleted it. It is StartSend,
// then Wait.
func (s *Service) Send(ctx context.Context, me Identity, req protocol.SendRequest) (protocol.MessageAck, error) {
	p, err := s.StartSend(ctx, me, req)
	if err != nil {
		return protocol.MessageAck{}, err
	}
	return p.Wait()
}

// StartSend begins Send and returns once the message has its place in the store's order
// (store.Store.StartAppend), without waiting for the commit: sends started one after
// another (one StartSend returning before the next is called) are stored in that order, so
// into one conversation their seqs increase in that order. Wait gives Send's answer. An
// error here is Send's (the request is invalid, or the store cannot take it) and nothing
// was stored.
//
// Everything that does not need the store (validation, the ids, encoding extra) happens
// here, on the caller's goroutine, so that the store's writer only applies.
func (s *Service) StartSend(ctx context.Context, me Identity, req protocol.SendRequest) (PendingSend, error) {
	start := s.now()
	extra, mentions, err := validateSend(req)
	if err != nil {
		return PendingSend{}, err
	}
	m := store.Message{
		ConvID: req.ConvID, MsgID: newID("m_"), ClientMsgID: req.ClientMsgID, SenderID: me.UserID,
		ContentType: req.ContentType, Content: req.Content, Extra: extra, CreatedAt: s.nowMS(),
		Mentions: mentions,
	}
	if protocol.IsAttachmentContent(req.ContentType) {
		if m.Content, m.AttachmentID, err = s.attachmentContent(ctx, me, req.Content, len(extra)); err != nil {
			return PendingSend{}, err
		}
	}
	epoch := s.recent.Epoch()
	p, err := s.st.StartAppend(ctx, m)
	if err != nil {
		return PendingSend{}, s.appendErr(ctx, err)
	}
	return PendingSend{s: s, ctx: ctx, start: start, convID: req.ConvID, clientMsgID: req.ClientMsgID, appended: p, epoch: epoch}, nil
}

// PendingSend is a send that StartSend has queued in the store.
type PendingSend struct {
	s                   *Service
	ctx                 context.Context
	start               time.Time
	convID, clientMsgID string
	appended            store.PendingAppend
	epoch               uint64 // of s.recent, before the commit
}

// Wait waits for the send's commit, publishes its events to the hub and returns the ack,
// or Send's error. Call it once.
func (p PendingSend) Wait() (protocol.MessageAck, error) {
	s, ctx := p.s, p.ctx
	res, err := p.appended.Wait()
	if err := s.appendErr(ctx, err); err != nil {
		return protocol.MessageAck{}, err
	}
	if res.Duplicate {
		ack, err := duplicateAck(res.Message, p.convID, p.clientMsgID)
		if err == nil {
			s.obs.MessageStored(s.now().Sub(p.start), true)
		}
		return ack, err
	}
	payload, ok := live.AppendMessageJSON(make([]byte, 0, 160+len(res.Message.Content)+len(res.Message.Extra)+mentionsJSONLen(res.Message.Mentions)), &res.Message)
	if !ok {
		return protocol.MessageAck{}, s.storeErr("send", errors.New("encode the message")) // cannot happen: content was validated
	}
	m := &res.Message
	// One event per member in write fanout, one per mentioned member in read fanout.
	inLog := s.publishMessageEvents(ctx, m, payload, res.Events)
	if res.ReadFanout {
		// No log has it but the mentioned members'. It goes live through the
		// conversation's room (to the others: the mentioned have it from their log), and
		// wakes the long-polls of its members, which read the conversation's new mark.
		s.recent.Add(res.Message, p.epoch)
		// The ack does not wait for the pushes (the room puts them in seq order).
		s.bg.Go(func(context.Context) { s.publishLive(m, payload, inLog) })
	}
	// After the events: the sender's read counts are pushed from here on, and its devices
	// must have the message before any count of it.
	s.messageSent(res.Message) // sending reads it; its sender gets its read counts pushed
	s.obs.MessageStored(s.now().Sub(p.start), false)
	return ackOf(res.Message, false), nil
}

// publishMessageEvents publishes the "message" events a send appended (events, each user
// once), with payload, m's encoding, as their data, and returns their users.
func (s *Service) publishMessageEvents(ctx context.Context, m *store.Message, payload []byte, events []store.Delivery) []string {
	if len(events) == 0 {
		return nil
	}
	body := &hub.Body{Type: protocol.EventMessage, ConvID: m.ConvID, TS: m.CreatedAt, Data: payload} // one for all: encoded once
	// Published as they are, without an outbox.
	evs := make([]hub.Event, len(events))
	users := make([]string, len(events))
	for i, d := range events {
		evs[i], users[i] = hub.Event{Cursor: d.Cursor, Body: body}, d.UserID
		s.hub.Publish(d.UserID, evs[i:i+1:i+1])
		if s.cluster != nil {
			s.cluster.Event(d.UserID, d.Cursor, body)
		}
		s.notifyPush(d.UserID, d.Cursor)
	}
	s.published(ctx, len(evs))
	return users
}

// appendErr turns the error of a message append into Send's (recording the write's outcome
// for Healthy, success included): a missing conversation or a non-member is one 404.
func (s *Service) appendErr(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		err = errNoConversation
	case errors.Is(err, store.ErrBadAttachment):
		return errBadAttachment // the request's fault: the write went fine
	}
	return s.wrote(ctx, "send", err)
}

// duplicateAck answers a send to convID whose (sender, clientMsgID) is already stored as m.
// A retry names the same conversation and gets the original ack. Naming another conversation
// is not a retry but a client that reused an id: answering the original ack, which names the
// first conversation, would let it believe the new message was stored. It gets 409 instead.
func duplicateAck(m store.Message, convID, clientMsgID string) (protocol.MessageAck, error) {
	if m.ConvID != convID {
		return protocol.MessageAck{}, fmt.Errorf("%w: client_msg_id %q was already used in another conversation: pick a new one for this message",
			ErrConflict, clientMsgID)
	}
	return ackOf(m, true), nil
}

// validateSend checks a send request and returns its extra encoded for storage and its
// mentions without repeats (nil when none). Mentions of non-members and of the sender are
// kept: they are stored with the message and do nothing else (store.MentionedUsers).
func validateSend(req protocol.SendRequest) (extra []byte, mentions []string, err error) {
	switch {
	case !protocol.ValidConvID(req.ConvID):
		return nil, nil, invalid("conv_id is missing or malformed")
	case !protocol.ValidClientMsgID(req.ClientMsgID):
		return nil, nil, invalid("client_msg_id must be 1-64 characters of [A-Za-z0-9_-]")
	case req.ContentType < 1:
		return nil, nil, invalid("content_type must be an integer of at least 1")
	case req.ContentType > protocol.MaxContentType:
		return nil, nil, invalid("content_type must be at most %d (2^31-1)", protocol.MaxContentType) // PostgreSQL's integer
	case len(req.Content) == 0 || string(req.Content) == "null":
		return nil, nil, invalid("content is required")
	case !json.Valid(req.Content):
		return nil, nil, invalid("content is not valid JSON")
	case len(req.Mentions) > protocol.MaxMentions:
		return nil, nil, invalid("mentions has more than %d entries", protocol.MaxMentions)
	}
	if len(req.Mentions) > 0 {
		set, bad := protocol.UserIDSet(slices.Clone(req.Mentions)) // the caller's slice stays as it was
		if bad >= 0 {
			return nil, nil, invalid("mentions[%d] is not a valid user_id", bad)
		}
		mentions = set
	}
	extra = live.EncodeExtra(req.Extra)
	if len(req.Content)+minimalJSONLen(req.Extra) > protocol.MaxContentBytes {
		return nil, nil, fmt.Errorf("%w: content plus extra exceed %d bytes", ErrTooLarge, protocol.MaxContentBytes)
	}
	return extra, mentions, nil
}

// minimalJSONLen is the length of the shortest JSON encoding of extra: what any client's
// encoding of it in a request measures at least. The 64 KiB limit counts request bytes;
// measuring the server's own re-encoding instead (which escapes U+2028 and more) would refuse
// requests the limit allows.
func minimalJSONLen(extra map[string]string) int {
	if extra == nil {
		return 0
	}
	n := 2 + max(len(extra)-1, 0) // braces and commas
	for k, v := range extra {
		n += minimalStringLen(k) + 1 + minimalStringLen(v) // key, colon, value
	}
	return n
}

// minimalStringLen is the length of s as a JSON string with only the escapes JSON demands.
func minimalStringLen(s string) int {
	n := 2
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f':
			n += 2
		case c < 0x20:
			n += 6
		default:
			n++
		}
	}
	return n
}

// HistoryQuery selects a page of messages. BeforeSeq > 0 selects the page below it;
// AroundTS > 0 (Unix ms) the page around the first visible message at or after that time
// (see around), and excludes the other two.
type HistoryQuery struct {
	AfterSeq  int64
	BeforeSeq int64
	AroundTS  int64
	Limit     int // 0 means the default; larger than the maximum is clamped
}

// History returns the caller's visible messages of a conversation in ascending seq order.
func (s *Service) History(ctx context.Context, me Identity, convID string, q HistoryQuery) (protocol.MessagesPage, error) {
	switch {
	case q.AfterSeq < 0 || q.BeforeSeq < 0 || q.AroundTS < 0 || q.Limit < 0:
		return protocol.MessagesPage{}, invalid("after_seq, before_seq, around_ts and limit must not be negative")
	case q.AfterSeq > 0 && q.BeforeSeq > 0:
		return protocol.MessagesPage{}, invalid("give after_seq or before_seq, not both")
	case q.AroundTS > 0 && (q.AfterSeq > 0 || q.BeforeSeq > 0):
		return protocol.MessagesPage{}, invalid("around_ts goes without after_seq and before_seq")
	case q.Limit == 0:
		q.Limit = protocol.DefaultPageLimit
	}
	q.Limit = min(q.Limit, protocol.MaxPageLimit)
	var page protocol.MessagesPage
	epoch := s.recent.Epoch()
	err := s.view(ctx, "history", func(tx store.ReadTx) error {
		c, m, err := loadConvMember(ctx, tx, convID, me.UserID)
		if err != nil {
			return err
		}
		if q.AroundTS > 0 {
			page, err = around(ctx, tx, c, visibleFrom(m), q.AroundTS, q.Limit)
			return err
		}
		if c.ReadFanout() {
			// A large group's newest messages, which all its online members pull after a
			// message, come from memory.
			// Unless the oldest of them has expired: the store's read leaves it out.
			ms, more, ok := s.recent.Page(convID, c.MaxSeq, visibleFrom(m), q.AfterSeq, q.BeforeSeq, q.Limit)
			if ok && (len(ms) == 0 || ms[0].CreatedAt >= store.ConversationCutoff(c, s.retention, s.now())) {
				page.Messages, page.HasMore = wireMessages(ms), more
				return nil
			}
		}
		r := store.MessageRange{Floor: visibleFrom(m), AfterSeq: q.AfterSeq, BeforeSeq: q.BeforeSeq, Limit: q.Limit + 1}
		ms, err := tx.Messages(ctx, convID, r)
		if err != nil {
			return err
		}
		if page.HasMore = len(ms) > q.Limit; page.HasMore {
			if q.BeforeSeq > 0 {
				ms = ms[1:] // the extra one is the oldest
			} else {
				ms = ms[:q.Limit]
			}
		}
		// A page from after_seq (or from the start) begins at the lowest seq above it; one
		// below before_seq reaches down only when there is no more.
		top := c.MaxSeq
		if q.BeforeSeq > 0 {
			top = min(top, q.BeforeSeq-1)
		}
		if q.BeforeSeq == 0 || !page.HasMore {
			if page.ExpiredBeforeSeq, err = expiredBefore(ctx, tx, c, max(r.Floor, q.AfterSeq), top, ms); err != nil {
				return err
			}
		}
		if c.ReadFanout() && len(ms) > 0 && ms[len(ms)-1].Seq == c.MaxSeq {
			for _, m := range ms { // the newest messages: later pulls find them in memory
				s.recent.Add(m, epoch)
			}
		}
		page.Messages = wireMessages(ms)
		return nil
	})
	return page, err
}

// around answers a jump to the time ts (Unix ms) for a member who sees the messages above
// floor: up to limit of them, ascending, around the anchor, the first visible message with
// created_at >= ts. The anchor is the first visible message when the one at ts is below the
// floor (the member joined or cleared after it), and 0 when every visible message is
// older, in which case the page is the newest ones. About half the page is before the
// anchor and the rest from it on; where one side has fewer, the other fills the page, so
// that a jump near either end still answers a full page.
//
// It reads only through the ReadTx (MessageAt, Messages), so that a store that adds cold
// messages to those reads answers jumps into them unchanged. Two range reads of limit+1
// after an O(log n) search: the cost does not grow with the conversation.
func around(ctx context.Context, tx store.ReadTx, c store.Conversation, floor, ts int64, limit int) (protocol.MessagesPage, error) {
	at, err := tx.MessageAt(ctx, c.ID, ts)
	switch {
	case errors.Is(err, store.ErrNotFound):
		at = c.MaxSeq + 1 // nothing from the anchor on: the page is the newest ones
	case err != nil:
		return protocol.MessagesPage{}, err
	}
	// From the anchor on; Floor moves an anchor below it to the first visible message.
	after, err := tx.Messages(ctx, c.ID, store.MessageRange{Floor: floor, AfterSeq: at - 1, Limit: limit + 1})
	if err != nil {
		return protocol.MessagesPage{}, err
	}
	var page protocol.MessagesPage
	if len(after) > 0 {
		page.AnchorSeq, at = after[0].Seq, after[0].Seq
	}
	before, err := tx.Messages(ctx, c.ID, store.MessageRange{Floor: floor, BeforeSeq: at, Limit: limit + 1})
	if err != nil {
		return protocol.MessagesPage{}, err
	}
	nb := min(len(before), max(limit/2, limit-len(after)))
	na := min(len(after), limit-nb)
	page.HasMoreBefore, page.HasMoreAfter = len(before) > nb, len(after) > na
	page.HasMore = page.HasMoreBefore || page.HasMoreAfter
	page.Messages = wireMessages(append(before[len(before)-nb:], after[:na]...))
	if !page.HasMoreBefore {
		shown := append(before[len(before)-nb:len(before):len(before)], after[:na]...)
		if page.ExpiredBeforeSeq, err = expiredBefore(ctx, tx, c, floor, c.MaxSeq, shown); err != nil {
			return protocol.MessagesPage{}, err
		}
	}
	return page, nil
}

// expiredBefore is a page's expired_before_seq, for a page that reaches down to the
// lowest message the member may see above low (their floor, or after_seq): ms, ascending,
// the messages it shows of low+1..top. Nothing but retention takes messages away, and
// what it takes is a prefix of the conversation (store.RetentionCutoff), so a page that
// starts above low+1, or is empty though top is above low, has reached the expired
// messages: the answer is the lowest seq still kept (MaxSeq+1 when none is), which the
// store's MessageAt finds from the cutoff on; 0, omitted, when nothing the member could
// see has expired.
func expiredBefore(ctx context.Context, tx store.ReadTx, c store.Conversation, low, top int64, ms []store.Message) (int64, error) {
	if len(ms) > 0 {
		if ms[0].Seq > low+1 {
			return ms[0].Seq, nil
		}
		return 0, nil
	}
	if top <= low {
		return 0, nil
	}
	first, err := tx.MessageAt(ctx, c.ID, 0) // from the retention's cutoff on: the first kept
	switch {
	case errors.Is(err, store.ErrNotFound):
		return c.MaxSeq + 1, nil
	case err != nil:
		return 0, err
	}
	return first, nil
}

// Recall recalls the caller's own message within the recall window: its content and extra
// are erased in storage and every member who can see it gets a "recall" event. Recalling
// twice succeeds.
func (s *Service) Recall(ctx context.Context, me Identity, convID string, seq int64) error {
	if seq < 1 {
		return invalid("seq must be at least 1")
	}
	defer s.recent.Drop(convID) // after the commit: the recalled message was maybe held
	if s.cluster != nil {
		defer s.cluster.Recalled(convID) // after the commit, for the other nodes' recent messages
	}
	return s.update(ctx, "recall", func(tx store.Tx, ob *outbox) error {
		if _, _, err := loadConvMember(ctx, tx, convID, me.UserID); err != nil {
			return err
		}
		m, err := tx.Message(ctx, convID, seq)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return fmt.Errorf("%w: message %d", ErrNotFound, seq)
		case err != nil:
			return err
		case m.SenderID != me.UserID:
			return fmt.Errorf("%w: only the sender recalls a message", ErrForbidden)
		case m.Recalled:
			return nil
		case s.now().Sub(time.UnixMilli(m.CreatedAt)) > s.cfg.RecallWindow:
			return fmt.Errorf("%w: the recall window of %s has passed", ErrForbidden, s.cfg.RecallWindow)
		}
		if err := tx.RecallMessage(ctx, convID, seq, s.nowMS()); err != nil {
			return err
		}
		members, err := tx.Members(ctx, convID)
		if err != nil {
			return err
		}
		var to []string
		for _, mem := range members {
			if seq > visibleFrom(mem) { // else they never saw it (or cleared it): the event would only tell them it existed
				to = append(to, mem.UserID)
			}
		}
		data := protocol.RecallData{Seq: seq, MsgID: m.MsgID, SenderID: m.SenderID}
		return ob.appendDataTo(ctx, tx, to, protocol.EventRecall, convID, s.nowMS(), data)
	})
}

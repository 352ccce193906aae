package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// EventMessage is the type of the event AppendMessage writes into every member's log. Its
// payload is the message itself, referenced by (ConvID, Seq): see Event.
const EventMessage = "message"

// ErrNotMember is returned (wrapped) by AppendMessage when the conversation does not exist
// or the sender is not one of its members. It wraps ErrNotFound: a caller that answers
// both the same way (as chat must, so as not to tell a stranger which conversations exist)
// can test for either.
var ErrNotMember = fmt.Errorf("%w: no such conversation or not a member", ErrNotFound)

// Appended is the result of AppendMessage.
//
// For a new (SenderID, ClientMsgID), AppendMessage has, in one atomic step:
//   - stored the message with Seq = the conversation's MaxSeq + 1 (gapless per conversation)
//     and raised the conversation's MaxSeq to it and its UpdatedAt to the message's
//     CreatedAt;
//   - appended a "message" event (Type EventMessage, TS the message's CreatedAt, Seq) to the
//     log of every member, the sender included, each with that user's next cursor;
//   - made the conversation visible again (Hidden = false) for members who had hidden it;
//   - raised the sender's ReadSeq and DeliveredSeq to Seq: a sender has read what it sent.
//
// A read-fanout conversation (Conversation.ReadFanout) has no event per member: its message
// is appended as an event, in the same step, only to the log of each user in Mentions who
// is a member and not the sender (MentionedUsers), each with that user's next cursor, and
// touches no row of theirs but their log. Appended.Events lists those, in the order of
// Mentions. In a write-fanout conversation every member has the event anyway, so Mentions
// change nothing there but the stored message.
//
// If (SenderID, ClientMsgID) was already stored, in any conversation, it writes nothing and
// returns the stored message with Duplicate set: the sender's retry gets the original back.
// The check holds against every message ever stored, however old.
type Appended struct {
	Message   Message    // as stored: Seq assigned; on a duplicate, the original message
	Duplicate bool       // the message was stored before; nothing was written now
	Events    []Delivery // the events appended, in the order of Members (read fanout: of Mentions); nil on a duplicate and in a read-fanout conversation without mentioned members
	// ReadFanout says that the message went to a read-fanout conversation: Events are then
	// the mentioned members' only. False on a duplicate.
	ReadFanout bool
}

// MentionedUsers returns the users of m.Mentions who may get a read-fanout message's event:
// each once, in the order of their first mention, without the sender. Whether each is a
// member is the backend's to check.
func MentionedUsers(m Message) []string {
	var out []string
	for _, u := range m.Mentions {
		if u != m.SenderID && !slices.Contains(out, u) { // at most 50 (protocol): a scan is cheap
			out = append(out, u)
		}
	}
	return out
}

// PendingAppend is an append that Store.StartAppend has queued.
type PendingAppend interface {
	// Wait waits until the append has committed or failed and returns what AppendMessage
	// would have: the result, durable and visible, or the error (ctx's error when the
	// append was dropped before the store began it). Call it once, from one goroutine.
	Wait() (Appended, error)
}

// StartAndWait is AppendMessage made of s's StartAppend and Wait, as a backend whose
// AppendMessage is nothing more implements it.
func StartAndWait(ctx context.Context, s Store, m Message) (Appended, error) {
	p, err := s.StartAppend(ctx, m)
	if err != nil {
		return Appended{}, err
	}
	return p.Wait()
}

// Delivery names one event AppendMessage appended: the user whose log holds it and its
// cursor there.
type Delivery struct {
	UserID string
	Cursor int64
}

// AppendTx is AppendMessage built from a transaction's row methods, for a backend whose
// Updates are serializable (one writer): reading MaxSeq and writing MaxSeq+1 inside one
// transaction is then atomic. m.Seq is ignored; m.MsgID must be new. nextMark returns the
// store's next mark (MarkReader) inside tx, for a read-fanout conversation.
func AppendTx(ctx context.Context, tx Tx, m Message, nextMark func() (int64, error)) (Appended, error) {
	if orig, err := tx.MessageByClientID(ctx, m.SenderID, m.ClientMsgID); err == nil {
		return Appended{Message: orig, Duplicate: true}, nil
	} else if !errors.Is(err, ErrNotFound) {
		return Appended{}, err
	}
	c, err := tx.Conversation(ctx, m.ConvID)
	if errors.Is(err, ErrNotFound) {
		return Appended{}, ErrNotMember
	} else if err != nil {
		return Appended{}, err
	}
	// Membership by one lookup before reading every member: a non-member's refusal then
	// costs the same for a large group as for a missing conversation.
	sender, err := tx.Member(ctx, m.ConvID, m.SenderID)
	if errors.Is(err, ErrNotFound) {
		return Appended{}, ErrNotMember
	} else if err != nil {
		return Appended{}, err
	}
	var members []Member
	if c.ReadFanout() {
		members = []Member{sender} // no event, and no other member's row: see Conversation.ReadFrom
	} else if members, err = tx.Members(ctx, c.ID); err != nil {
		return Appended{}, err
	}
	m.Seq = c.MaxSeq + 1
	if err := tx.InsertMessage(ctx, m); err != nil {
		return Appended{}, err
	}
	c.MaxSeq, c.UpdatedAt = m.Seq, max(c.UpdatedAt, m.CreatedAt)
	if c.ReadFanout() {
		if c.Mark, err = nextMark(); err != nil {
			return Appended{}, err
		}
	}
	if err := tx.UpdateConversation(ctx, c); err != nil {
		return Appended{}, err
	}
	res := Appended{Message: m, ReadFanout: c.ReadFanout()}
	for _, mem := range members {
		if !c.ReadFanout() {
			ev := Event{UserID: mem.UserID, Type: EventMessage, ConvID: m.ConvID, TS: m.CreatedAt, Seq: m.Seq}
			cursor, err := tx.AppendEvent(ctx, ev)
			if err != nil {
				return Appended{}, fmt.Errorf("append message event for %s: %w", mem.UserID, err)
			}
			res.Events = append(res.Events, Delivery{UserID: mem.UserID, Cursor: cursor})
		}
		if mem, changed := AfterAppend(mem, m); changed {
			if err := tx.PutMember(ctx, mem); err != nil {
				return Appended{}, err
			}
		}
	}
	if c.ReadFanout() {
		for _, u := range MentionedUsers(m) {
			if _, err := tx.Member(ctx, m.ConvID, u); errors.Is(err, ErrNotFound) {
				continue // not a member: the mention is only stored
			} else if err != nil {
				return Appended{}, err
			}
			ev := Event{UserID: u, Type: EventMessage, ConvID: m.ConvID, TS: m.CreatedAt, Seq: m.Seq}
			cursor, err := tx.AppendEvent(ctx, ev)
			if err != nil {
				return Appended{}, fmt.Errorf("append message event for mentioned %s: %w", u, err)
			}
			res.Events = append(res.Events, Delivery{UserID: u, Cursor: cursor})
		}
	}
	return res, nil
}

// AfterAppend returns member mem as appending m leaves it, and whether that changed it:
// visible again, and for the sender read and delivered up to m.
func AfterAppend(mem Member, m Message) (Member, bool) {
	changed := mem.Hidden
	mem.Hidden = false
	if mem.UserID == m.SenderID {
		if mem.ReadSeq < m.Seq || mem.DeliveredSeq < m.Seq {
			changed = true
		}
		mem.ReadSeq, mem.DeliveredSeq = max(mem.ReadSeq, m.Seq), max(mem.DeliveredSeq, m.Seq)
	}
	return mem, changed
}

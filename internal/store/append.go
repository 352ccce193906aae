package store

import (
	"context"
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
//     and CreatedAt raised to the conversation's UpdatedAt if it was below, so that no
//     message is older than the one before it, and raised the conversation's MaxSeq to
//     Seq and its UpdatedAt to the message's CreatedAt;
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

// AppendView is what a backend has loaded for one append: every row the append rule
// (DecideAppend) reads. The rule reads the fields in order and stops at the first that
// settles the answer, so a backend may leave the later ones zero once one does: nothing
// after Original when it is set, nothing after Conv or Sender when either is nil.
type AppendView struct {
	// Original is the message stored before under m's (SenderID, ClientMsgID), in any
	// conversation; nil when there is none.
	Original *Message
	// Conv is m's conversation as readers see it; nil when it does not exist.
	Conv *Conversation
	// Sender is the sender's member row as readers see it; nil when not a member.
	Sender *Member
	// Attachment is, when m.AttachmentID is set, that attachment's row as readers see it;
	// nil when it does not exist. The rule stops here when it is not sendable.
	Attachment *Attachment
	// Members are, for a write-fanout conversation, every member's row in Members order,
	// the sender's included. Unused in a read-fanout conversation, whose only member row
	// an append touches is the sender's.
	Members []Member
	// Mentioned are, for a read-fanout conversation, the users of MentionedUsers(m) who are
	// members, in that order. Unused in a write-fanout conversation.
	Mentioned []string
	// Logs are the last cursors of the logs that get m's event, in the order of the events:
	// Members' users, or Mentioned.
	Logs []int64
	// LastMark is the store's last mark (MarkReader), for a read-fanout conversation. A
	// backend that hands marks out at commit may pass one relative to its batch.
	LastMark int64
}

// AppendPlan is what an append does, as DecideAppend decided it: the result, and every
// row it writes. A backend saves it as it likes (Pebble leaves rows that the newest
// message implies unwritten), but writes nothing that is not here.
type AppendPlan struct {
	// Appended is the result, Events included; on a duplicate nothing below is set and
	// nothing is written.
	Appended
	// Conv is the conversation row after the append: MaxSeq, UpdatedAt and, in a read-fanout
	// conversation, Mark.
	Conv Conversation
	// After are the member rows the append read (AppendView.Members, or the sender's alone
	// in a read-fanout conversation) as it leaves them, in that order; Changed[i] says
	// whether After[i] differs from the row read.
	After   []Member
	Changed []bool
	// Attachment is, when the message carries one, the attachment's row after the append:
	// Refs one more, IdleSince 0. A backend with several writers applies it as an increment
	// on the row it checked and locked, not as a write of these values.
	Attachment *Attachment
	// The message events to write are one per Appended.Events: type EventMessage, in the
	// delivery's user's log under its cursor, with m's ConvID, Seq and CreatedAt as TS.
}

// Event returns the event the plan writes for delivery d.
func (p *AppendPlan) Event(d Delivery) Event {
	m := &p.Message
	return Event{UserID: d.UserID, Cursor: d.Cursor, Type: EventMessage, ConvID: m.ConvID, TS: m.CreatedAt, Seq: m.Seq}
}

// DecideAppend is the append rule (see Appended), written once above the backends: from
// the rows v holds it decides m's answer (duplicate, refusal, or a new message), its seq,
// its events' cursors, the conversation's new state and every member row that changes,
// into p, whose slices it reuses. m.Seq is ignored; m.MsgID must be new. The backend then
// writes p in one atomic step. DecideAppend reads and writes nothing else, so the same
// rows give the same plan on every backend.
func DecideAppend(m Message, v *AppendView, p *AppendPlan) error {
	p.Appended, p.Conv, p.Attachment = Appended{}, Conversation{}, nil
	p.After, p.Changed = p.After[:0], p.Changed[:0]
	if v.Original != nil {
		p.Appended = Appended{Message: *v.Original, Duplicate: true}
		return nil
	}
	if v.Conv == nil || v.Sender == nil {
		return ErrNotMember
	}
	if m.AttachmentID != "" {
		a := v.Attachment
		if a == nil || a.ID != m.AttachmentID || a.OwnerID != m.SenderID || a.State != AttachmentComplete {
			return ErrBadAttachment
		}
		after := *a
		after.Refs, after.IdleSince = a.Refs+1, 0
		p.Attachment = &after
	}
	c := *v.Conv
	members, recipients := v.Members, len(v.Members)
	if c.ReadFanout() {
		members, recipients = []Member{*v.Sender}, len(v.Mentioned)
	}
	if len(v.Logs) != recipients {
		return fmt.Errorf("append: %d logs loaded for %d events", len(v.Logs), recipients)
	}
	m.Seq = c.MaxSeq + 1
	// No message is older than the one before it, whatever the clocks of the nodes that
	// sent them did, so that a search by time can bisect the seqs (SearchMessageAt).
	m.CreatedAt = max(m.CreatedAt, c.UpdatedAt)
	c.MaxSeq, c.UpdatedAt = m.Seq, m.CreatedAt
	if c.ReadFanout() {
		c.Mark = v.LastMark + 1
	}
	p.Conv = c
	p.Appended = Appended{Message: m, ReadFanout: c.ReadFanout()}
	if recipients > 0 {
		p.Events = make([]Delivery, recipients)
		for i := range p.Events {
			var user string
			if c.ReadFanout() {
				user = v.Mentioned[i]
			} else {
				user = members[i].UserID
			}
			p.Events[i] = Delivery{UserID: user, Cursor: v.Logs[i] + 1}
		}
	}
	for _, mem := range members {
		after, changed := AfterAppend(mem, m)
		p.After, p.Changed = append(p.After, after), append(p.Changed, changed)
	}
	return nil
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

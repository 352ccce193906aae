package client

import (
	"maps"
	"slices"
	"sync"

	"github.com/parleychat/parley/protocol"
)

// Inbox is a small in-memory merge of what a Client has seen: per conversation, its messages
// by seq, its latest ConversationBrief and its members' read positions. Set it as
// Options.Inbox, or feed it yourself (Apply, Merge, Reset). It is optional: apps with their
// own storage implement the same rules there.
//
// Merging is idempotent and order-insensitive where the protocol allows it: a (conv_id, seq)
// names one message forever, so a repeat changes nothing; a recall wins over any copy of the
// message seen before or after it; a deletion hides every seq up to its cleared_seq; a
// conv_updated saying "removed" (the user left or was removed) drops the conversation.
// Safe for concurrent use.
type Inbox struct {
	mu    sync.Mutex            // guards convs
	convs map[string]*inboxConv // conv_id -> state
}

type inboxConv struct {
	brief   *ConversationBrief
	msgs    map[int64]Message // seq -> message
	cleared int64             // messages with seq <= cleared are hidden
	reads   map[string]int64  // user_id -> read_seq
}

// NewInbox returns an empty Inbox.
func NewInbox() *Inbox { return &Inbox{convs: make(map[string]*inboxConv)} }

func (in *Inbox) conv(id string) *inboxConv {
	cv := in.convs[id]
	if cv == nil {
		cv = &inboxConv{msgs: make(map[int64]Message), reads: make(map[string]int64)}
		in.convs[id] = cv
	}
	return cv
}

// Apply merges one sync event. Events it does not know are ignored.
func (in *Inbox) Apply(ev SyncEvent) {
	in.mu.Lock()
	defer in.mu.Unlock()
	switch ev.Type {
	case protocol.EventMessage:
		if m, err := ev.Message(); err == nil {
			in.mergeLocked(m)
			// Sending advances the sender's read position; the protocol sends no read event
			// for it, since this event implies it.
			reads := in.conv(m.ConvID).reads
			reads[m.SenderID] = max(reads[m.SenderID], m.Seq)
		}
	case protocol.EventRecall:
		if d, err := ev.Recall(); err == nil {
			in.mergeLocked(Message{ConvID: ev.ConvID, Seq: d.Seq, MsgID: d.MsgID, SenderID: d.SenderID, Recalled: true})
		}
	case protocol.EventConvDeleted:
		if d, err := ev.ConvDeleted(); err == nil {
			in.clearLocked(ev.ConvID, d.ClearedSeq)
		}
	case protocol.EventConvUpdated:
		if b, err := ev.ConvUpdated(); err == nil {
			if b.Removed { // the user left or was removed: nothing of it is theirs any more
				delete(in.convs, b.ConvID)
				return
			}
			in.conv(b.ConvID).brief = &b
			in.clearLocked(b.ConvID, b.ClearedSeq)
		}
	case protocol.EventRead:
		if d, err := ev.Read(); err == nil {
			reads := in.conv(ev.ConvID).reads
			reads[d.UserID] = max(reads[d.UserID], d.ReadSeq)
		}
	}
}

// ApplyBrief keeps b as the conversation's latest brief, as a conv_updated event does: the
// session calls it with the state of read-fanout conversations (Options.OnConversation).
func (in *Inbox) ApplyBrief(b ConversationBrief) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if b.Removed {
		delete(in.convs, b.ConvID)
		return
	}
	in.conv(b.ConvID).brief = &b
	in.clearLocked(b.ConvID, b.ClearedSeq)
}

// Merge adds messages, from a History page for instance.
func (in *Inbox) Merge(msgs ...Message) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, m := range msgs {
		in.mergeLocked(m)
	}
}

// Reset replaces the whole Inbox with a snapshot. Everything older is dropped rather than
// merged: a reset follows events the Inbox missed (recalls, deletions), so older copies may
// be stale. Reload older history with Client.History.
func (in *Inbox) Reset(snap SyncSnapshot) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.convs = make(map[string]*inboxConv)
	for i := range snap.Conversations {
		b := snap.Conversations[i]
		cv := in.conv(b.ConvID)
		cv.brief = &b
		cv.cleared = b.ClearedSeq
	}
	for convID, msgs := range snap.Messages {
		for _, m := range msgs {
			if m.ConvID == "" {
				m.ConvID = convID
			}
			in.mergeLocked(m)
		}
	}
	for convID, reads := range snap.ReadPositions {
		maps.Copy(in.conv(convID).reads, reads)
	}
}

// mergeLocked adds m unless hidden, keeping the copy already held except that a recalled
// copy (content and extra null) always wins. Lock mu must be held.
func (in *Inbox) mergeLocked(m Message) {
	cv := in.conv(m.ConvID)
	if m.Seq <= cv.cleared {
		return
	}
	if m.Recalled {
		m.Content, m.Extra = nil, nil
	}
	old, ok := cv.msgs[m.Seq]
	switch {
	case !ok:
		cv.msgs[m.Seq] = m
	case m.Recalled && !old.Recalled:
		// Keep what the recall leaves (ids, time, type); drop the content.
		old.Recalled, old.Content, old.Extra = true, nil, nil
		cv.msgs[m.Seq] = old
	case !m.Recalled && old.Recalled && old.ClientMsgID == "":
		// The recall came first and left a placeholder; fill in the metadata.
		m.Recalled, m.Content, m.Extra = true, nil, nil
		cv.msgs[m.Seq] = m
	}
}

func (in *Inbox) clearLocked(convID string, cleared int64) {
	cv := in.conv(convID)
	if cleared <= cv.cleared {
		return
	}
	cv.cleared = cleared
	for seq := range cv.msgs {
		if seq <= cleared {
			delete(cv.msgs, seq)
		}
	}
}

// Messages returns the visible messages of convID held, ascending by seq.
func (in *Inbox) Messages(convID string) []Message {
	in.mu.Lock()
	defer in.mu.Unlock()
	cv := in.convs[convID]
	if cv == nil {
		return nil
	}
	out := make([]Message, 0, len(cv.msgs))
	for _, seq := range slices.Sorted(maps.Keys(cv.msgs)) {
		out = append(out, cv.msgs[seq])
	}
	return out
}

// Message returns message seq of convID, if held.
func (in *Inbox) Message(convID string, seq int64) (Message, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	cv := in.convs[convID]
	if cv == nil {
		return Message{}, false
	}
	m, ok := cv.msgs[seq]
	return m, ok
}

// Conversation returns the latest ConversationBrief seen for convID (from a snapshot or a
// conv_updated event). Its per-user counters are as of that moment, not kept up to date.
func (in *Inbox) Conversation(convID string) (ConversationBrief, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	cv := in.convs[convID]
	if cv == nil || cv.brief == nil {
		return ConversationBrief{}, false
	}
	return *cv.brief, true
}

// ReadSeq returns userID's read position in convID as last seen, 0 if unknown.
func (in *Inbox) ReadSeq(convID, userID string) int64 {
	in.mu.Lock()
	defer in.mu.Unlock()
	if cv := in.convs[convID]; cv != nil {
		return cv.reads[userID]
	}
	return 0
}

// ConversationIDs returns the ids of every conversation the Inbox holds anything about.
func (in *Inbox) ConversationIDs() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Sorted(maps.Keys(in.convs))
}

//go:build pebble

package pebble

import (
	"context"
	"errors"
	"fmt"

	"github.com/parleychat/parley/internal/store"
)

// hotState is the writer's in-memory copy of what AppendMessage reads: each active
// conversation's head (its row and its members) and each active user's log bounds. With it
// a send reads nothing but its dedup key, and that is a bloom-filtered miss.
//
// It describes the writer's batch, uncommitted writes included, and only the writer
// goroutine touches it. Every write through a txn (every Update) drops the entries of the
// conversation or user it touches (txn.set, txn.del), so the next AppendMessage reloads
// them from the batch; AppendMessage itself updates the entries it writes. If a commit
// fails the store refuses every later call, so the entries never describe a batch that
// was thrown away. Loaded lazily, bounded (trim), and rebuilt from the keys after a restart,
// which is all it needs: it holds nothing that is not also in the store.
type hotState struct {
	convs   map[string]*convHead
	users   map[string]store.CursorBounds
	members int // members held by all heads, for the bound
}

// The bounds of hotState, trimmed between batches. A head costs about 150 bytes per
// member, a user's bounds about 80: at most some 40 MiB in all.
const (
	maxHotMembers = 1 << 18
	maxHotUsers   = 1 << 18
)

// convHead is one conversation as AppendMessage needs it.
type convHead struct {
	conv    store.Conversation
	members []store.Member // in Members order
	index   map[string]int // user -> position in members, for large conversations only
}

// smallConv is the size up to which a linear scan finds a member faster than a map.
const smallConv = 8

func (h *convHead) member(user string) int {
	if h.index != nil {
		if i, ok := h.index[user]; ok {
			return i
		}
		return -1
	}
	for i := range h.members {
		if h.members[i].UserID == user {
			return i
		}
	}
	return -1
}

func newHotState() hotState {
	return hotState{convs: make(map[string]*convHead), users: make(map[string]store.CursorBounds)}
}

// dropConv and dropUser forget an entry that a write is about to change.
func (h *hotState) dropConv(id string) {
	if c, ok := h.convs[id]; ok {
		h.members -= len(c.members)
		delete(h.convs, id)
	}
}

func (h *hotState) dropUser(id string) { delete(h.users, id) }

// invalidate drops the entry that the key written belongs to, if any (keys.go).
func (h *hotState) invalidate(key []byte) {
	if len(key) == 0 {
		return
	}
	switch key[0] {
	case tConversation, tMember, tRoster:
		if id, _, err := readStr(key[1:]); err == nil {
			h.dropConv(id)
		} else {
			clear(h.convs) // cannot happen: keys are built by keys.go
			h.members = 0
		}
	case tBounds:
		if id, _, err := readStr(key[1:]); err == nil {
			h.dropUser(id)
		} else {
			clear(h.users)
		}
	}
}

// trim keeps the state within its bounds, dropping arbitrary entries: a dropped one is
// simply read again when next needed.
func (h *hotState) trim() {
	for id := range h.convs {
		if h.members <= maxHotMembers {
			break
		}
		h.dropConv(id)
	}
	for id := range h.users {
		if len(h.users) <= maxHotUsers {
			break
		}
		delete(h.users, id)
	}
}

// head returns the conversation's head, reading it through t when it is not held; nil when
// the conversation does not exist.
func (h *hotState) head(ctx context.Context, t *txn, id string) (*convHead, error) {
	if c, ok := h.convs[id]; ok {
		return c, nil
	}
	r := readTx{t}
	c, err := r.Conversation(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	ms, err := r.Members(ctx, id)
	if err != nil {
		return nil, err
	}
	head := &convHead{conv: c, members: ms}
	if len(ms) > smallConv {
		head.index = make(map[string]int, len(ms))
		for i, m := range ms {
			head.index[m.UserID] = i
		}
	}
	h.convs[id] = head
	h.members += len(ms)
	return head, nil
}

// bounds returns the user's log bounds, reading them through t when not held.
func (h *hotState) bounds(ctx context.Context, t *txn, user string) (store.CursorBounds, error) {
	if b, ok := h.users[user]; ok {
		return b, nil
	}
	b, err := readTx{t}.Cursors(ctx, user)
	if errors.Is(err, store.ErrNotFound) {
		// A member who is not a user: the rows disagree, which no Update can cause.
		return b, corrupt(errCorrupt, "member %q of a conversation is not a user", user)
	}
	if err != nil {
		return b, err
	}
	h.users[user] = b
	return b, nil
}

// appendMessage is AppendMessage on the writer goroutine (see store.Appended). Everything
// that can fail is done before the first write; the writes go through t.set like any
// Update's, with their previous values taken from the hot state, so that a panic midway is
// undone like a failed Update. The hot state is updated only after the last write.
func (w *writer) appendMessage(ctx context.Context, t *txn, m store.Message) (store.Appended, error) {
	if err := t.check(ctx); err != nil {
		return store.Appended{}, err
	}
	if orig, err := (readTx{t}).MessageByClientID(ctx, m.SenderID, m.ClientMsgID); err == nil {
		return store.Appended{Message: orig, Duplicate: true}, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return store.Appended{}, err
	}
	h, err := w.hot.head(ctx, t, m.ConvID)
	if err != nil {
		return store.Appended{}, err
	}
	if h == nil || h.member(m.SenderID) < 0 {
		return store.Appended{}, store.ErrNotMember
	}
	bounds := w.scratch.bounds[:0]
	for _, mem := range h.members {
		b, err := w.hot.bounds(ctx, t, mem.UserID)
		if err != nil {
			return store.Appended{}, err
		}
		bounds = append(bounds, b)
	}
	w.scratch.bounds = bounds

	// Writes. t.set records each key's previous state for the undo log.
	m.Seq = h.conv.MaxSeq + 1
	t.key = messageKey(t.key[:0], m.ConvID, m.Seq)
	n1 := len(t.key)
	t.key = msgIDKey(t.key, m.MsgID)
	n2 := len(t.key)
	t.key = clientIDKey(t.key, m.SenderID, m.ClientMsgID)
	gk, ik, kk := t.key[:n1], t.key[n1:n2], t.key[n2:]
	t.enc = encodeMessage(t.enc[:0], m)
	// The message keys are new: seq is above every seq stored, the msg_id is a fresh random
	// id, and the client id key was just found missing.
	if err := t.setNew(gk, t.enc); err != nil {
		return store.Appended{}, err
	}
	ref := gk[1:] // enc(conv) int(seq)
	if err := t.setNew(ik, ref); err != nil {
		return store.Appended{}, err
	}
	if err := t.setNew(kk, ref); err != nil {
		return store.Appended{}, err
	}
	conv := h.conv
	conv.MaxSeq, conv.UpdatedAt = m.Seq, max(conv.UpdatedAt, m.CreatedAt)
	if err := t.setKnown(convKey(t.key[:0], conv.ID), encodeConversation(t.enc[:0], conv), encodeConversation(w.scratch.prev[:0], h.conv)); err != nil {
		return store.Appended{}, err
	}
	res := store.Appended{Message: m, Events: make([]store.Delivery, len(h.members))}
	ev := store.Event{Type: store.EventMessage, ConvID: m.ConvID, TS: m.CreatedAt, Seq: m.Seq}
	for i, mem := range h.members {
		b := &bounds[i]
		ev.UserID = mem.UserID
		if err := w.appendEvent(t, b, ev); err != nil {
			return store.Appended{}, err
		}
		res.Events[i] = store.Delivery{UserID: mem.UserID, Cursor: b.Last}
		if after, changed := store.AfterAppend(mem, m); changed {
			if err := t.setKnown(memberKey(t.key[:0], m.ConvID, mem.UserID), encodeMember(t.enc[:0], after), encodeMember(w.scratch.prev[:0], mem)); err != nil {
				return store.Appended{}, err
			}
		}
	}

	// Every write is in the batch: the hot state follows.
	h.conv = conv
	for i, mem := range h.members {
		h.members[i], _ = store.AfterAppend(mem, m)
		w.hot.users[mem.UserID] = bounds[i]
	}
	return res, nil
}

// appendEvent writes ev as the next event of its user, whose bounds are *b (raised here),
// like AppendEvent but with the bounds from the hot state.
func (w *writer) appendEvent(t *txn, b *store.CursorBounds, ev store.Event) error {
	prev := encodeBounds(w.scratch.prev[:0], *b)
	b.Last++
	if err := t.setKnown(boundsKey(t.key[:0], ev.UserID), encodeBounds(t.enc[:0], *b), prev); err != nil {
		return err
	}
	t.key = eventKey(t.key[:0], ev.UserID, b.Last)
	n := len(t.key)
	t.key = eventByTimeKey(t.key, ev.TS, ev.UserID, b.Last)
	ek, tk := t.key[:n], t.key[n:]
	if err := t.setNew(ek, encodeEvent(t.enc[:0], ev)); err != nil {
		return err
	}
	return t.setNew(tk, nil)
}

// appendScratch are the writer's buffers for appendMessage, reused from send to send.
type appendScratch struct {
	bounds []store.CursorBounds
	prev   []byte
}

// AppendMessage implements store.Store: it runs on the writer goroutine, in the group
// commit of concurrent Updates, with the conversation's head and its members' cursors
// from the writer's memory (hotState).
func (s *Store) AppendMessage(ctx context.Context, m store.Message) (store.Appended, error) {
	var res store.Appended
	err := s.Update(ctx, func(tx store.Tx) error {
		w, ok := tx.(writeTx)
		if !ok {
			return fmt.Errorf("pebble: AppendMessage got a %T", tx)
		}
		var err error
		res, err = s.w.appendMessage(ctx, w.t, m)
		return err
	})
	return res, err
}

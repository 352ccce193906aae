package pebble

import (
	"context"
	"errors"
	"slices"

	"github.com/parleychat/parley/internal/store"
)

// Conversation implements store.ConversationReader.
func (r readTx) Conversation(ctx context.Context, id string) (store.Conversation, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return store.Conversation{}, err
	}
	c, err := t.storedConversation(id)
	if err != nil {
		return c, err
	}
	n, err := t.newest(id)
	return n.conversation(c), err
}

// storedConversation reads the conversation row as stored, without what the newest message
// implies.
func (t *txn) storedConversation(id string) (store.Conversation, error) {
	v, found, err := t.getConv(id)
	if err != nil {
		return store.Conversation{}, err
	}
	if !found {
		return store.Conversation{}, notFound("conversation %q", id)
	}
	c, err := decodeConversation(v, id)
	if err != nil {
		return store.Conversation{}, corrupt(err, "conversation %q", id)
	}
	return c, nil
}

// latest is what a conversation's newest message implies about rows AppendMessage does not
// rewrite (docs/design.md, "Rows derived from the log"): the conversation's max_seq and
// latest activity, and its sender's read and delivered positions.
type latest struct {
	seq    int64 // 0 when the conversation has no message
	at     int64
	sender string
}

// newest reads the conversation's latest message. A recall rewrites a message, and only
// SealSegment deletes any, after writing into the rows what the newest of them implied
// (impliedByNewest), so its seq is the conversation's max_seq whenever there is one.
func (t *txn) newest(convID string) (latest, error) {
	prefix := appendStr([]byte{tMessage}, convID)
	it, err := t.iter(prefix, prefixEnd(prefix))
	if err != nil {
		return latest{}, err
	}
	var n latest
	if it.Last() {
		m, err := iterMessage(it, prefix, convID)
		if err != nil {
			return latest{}, errors.Join(corrupt(err, "messages of conversation %q", convID), it.Close())
		}
		n = latest{seq: m.Seq, at: m.CreatedAt, sender: m.SenderID}
	}
	return n, closeIter(it)
}

// conversation returns c with its max_seq and activity raised to what the newest message
// says.
func (n latest) conversation(c store.Conversation) store.Conversation {
	c.MaxSeq, c.UpdatedAt = max(c.MaxSeq, n.seq), max(c.UpdatedAt, n.at)
	return c
}

// member returns m with its positions raised to the newest message if m sent it: sending
// reads and receives one's own message, and AppendMessage leaves that to be implied.
func (n latest) member(m store.Member) store.Member {
	if n.sender == m.UserID && n.seq > 0 {
		m.ReadSeq, m.DeliveredSeq = max(m.ReadSeq, n.seq), max(m.DeliveredSeq, n.seq)
	}
	return m
}

// getConv reads the conversation row, from the cache when this transaction has it.
func (t *txn) getConv(id string) ([]byte, bool, error) {
	if t.conv.valid && t.conv.id == id {
		return t.conv.val, true, nil
	}
	t.key = convKey(t.key[:0], id)
	v, found, err := t.get(t.key)
	if found {
		t.cacheConv(id, v)
	}
	return v, found, err
}

// CreateConversation implements store.ConversationWriter.
func (w writeTx) CreateConversation(ctx context.Context, c store.Conversation) error {
	t := w.t
	if err := t.check(ctx); err != nil {
		return err
	}
	t.key = convKey(t.key[:0], c.ID)
	if found, err := t.exists(t.key); err != nil || found {
		if err == nil {
			err = exists("create conversation %q", c.ID)
		}
		return err
	}
	t.enc = encodeConversation(t.enc[:0], c)
	if err := t.set(t.key, t.enc, nil, false); err != nil {
		return err
	}
	t.cacheConv(c.ID, t.enc)
	return nil
}

// UpdateConversation implements store.ConversationWriter.
func (w writeTx) UpdateConversation(ctx context.Context, c store.Conversation) error {
	t := w.t
	if err := t.check(ctx); err != nil {
		return err
	}
	prev, found, err := t.getConv(c.ID)
	if err != nil {
		return err
	}
	if !found {
		return notFound("update conversation %q", c.ID)
	}
	was, err := decodeConversation(prev, c.ID)
	if err != nil {
		return corrupt(err, "conversation %q", c.ID)
	}
	prev = slices.Clone(prev)
	t.key = convKey(t.key[:0], c.ID)
	t.enc = encodeConversation(t.enc[:0], c)
	if err := t.set(t.key, t.enc, prev, true); err != nil {
		t.conv.valid = false
		return err
	}
	t.cacheConv(c.ID, t.enc)
	if was.ReadFanout() != c.ReadFanout() {
		return t.indexReadFanout(c.ID, c.ReadFanout())
	}
	return nil
}

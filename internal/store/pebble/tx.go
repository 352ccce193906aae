package pebble

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"

	"github.com/parleychat/parley/internal/store"
)

// reader is what both an indexed batch (the writer) and a snapshot (a View) offer.
type reader interface {
	Get(key []byte) ([]byte, io.Closer, error)
	NewIter(o *pebble.IterOptions) (*pebble.Iterator, error)
}

// txnBufs are scratch buffers: keys being built, the last value read, a value being
// encoded. The writer hands them from one request to the next.
type txnBufs struct {
	key, val, enc []byte
}

// txn is one transaction: a View on a snapshot (b == nil), or one request of a group
// commit on the shared indexed batch.
type txn struct {
	r    reader
	b    *pebble.Batch // nil in a View
	undo *undoLog
	hot  *hotState // the writer's, nil in a View: writes keep it right
	txnBufs
	ended atomic.Bool // set when fn has returned: a kept tx must not touch later batches

	// conv caches the conversation row this transaction last read or wrote, so that the
	// read-modify-write of a send (Conversation, then UpdateConversation) reads it once.
	// Only this transaction's conversation methods write conversation keys while it runs.
	conv struct {
		id    string
		val   []byte
		valid bool
	}
}

// cacheConv remembers the conversation row id=val.
func (t *txn) cacheConv(id string, val []byte) {
	t.conv.id, t.conv.val, t.conv.valid = id, append(t.conv.val[:0], val...), true
}

// readTx implements store.ReadTx on a txn.
type readTx struct{ t *txn }

// writeTx implements store.Tx on a txn.
type writeTx struct{ readTx }

var (
	_ store.ReadTx = readTx{}
	_ store.Tx     = writeTx{}
)

// check refuses work once fn has returned or its ctx is done.
func (t *txn) check(ctx context.Context) error {
	if t.ended.Load() {
		return errTxDone
	}
	return ctx.Err()
}

// get reads key into t.val, valid until the next get. found is false for a missing key.
func (t *txn) get(key []byte) (val []byte, found bool, err error) {
	v, closer, err := t.r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("%w: pebble: read: %w", store.ErrUnavailable, err)
	}
	t.val = append(t.val[:0], v...)
	_ = closer.Close()
	return t.val, true, nil
}

// exists reports whether key is present.
func (t *txn) exists(key []byte) (bool, error) {
	_, found, err := t.get(key)
	return found, err
}

// iter opens an iterator over [lower, upper).
func (t *txn) iter(lower, upper []byte) (*pebble.Iterator, error) {
	it, err := t.r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, fmt.Errorf("%w: pebble: iterate: %w", store.ErrUnavailable, err)
	}
	return it, nil
}

// iterEvent decodes the event under it, an iterator over user's log (keys prefix followed by
// int(cursor)), and returns it with its stored value.
func iterEvent(it *pebble.Iterator, prefix []byte, user string) (e store.Event, v []byte, err error) {
	c, _, err := readInt(it.Key()[len(prefix):])
	if err == nil {
		v, err = it.ValueAndErr()
	}
	if err == nil {
		e, err = decodeEvent(v, user, c)
	}
	return e, v, err
}

// iterMessage decodes the message under it, an iterator over the conversation's messages
// (keys prefix followed by int(seq)).
func iterMessage(it *pebble.Iterator, prefix []byte, convID string) (store.Message, error) {
	seq, _, err := readInt(it.Key()[len(prefix):])
	var v []byte
	if err == nil {
		v, err = it.ValueAndErr()
	}
	if err != nil {
		return store.Message{}, err
	}
	return decodeMessage(v, convID, seq)
}

// closeIter closes it, reporting its error (an I/O error met while iterating).
func closeIter(it *pebble.Iterator) error {
	if err := it.Close(); err != nil {
		return fmt.Errorf("%w: pebble: iterate: %w", store.ErrUnavailable, err)
	}
	return nil
}

// set writes key=val into the batch after recording what key held before: prev if
// existed, else nothing. Callers know the previous state because they read the key or
// because of a layout invariant (see keys.go).
// The writer's hot state (hotState) forgets the row key belongs to.
func (t *txn) set(key, val, prev []byte, existed bool) error {
	if t.hot != nil {
		t.hot.invalidate(key)
	}
	return t.write(key, val, prev, existed)
}

// setNew and setKnown are set for AppendMessage, which keeps the hot state right itself:
// setNew writes a key known to be absent, setKnown one known to hold prev.
func (t *txn) setNew(key, val []byte) error         { return t.write(key, val, nil, false) }
func (t *txn) setKnown(key, val, prev []byte) error { return t.write(key, val, prev, true) }

func (t *txn) write(key, val, prev []byte, existed bool) error {
	if t.b == nil {
		return errors.New("pebble: write in a read-only transaction")
	}
	t.undo.record(key, prev, existed)
	if err := t.b.Set(key, val, nil); err != nil {
		return fmt.Errorf("%w: pebble: write: %w", store.ErrUnavailable, err)
	}
	return nil
}

// del deletes key, which held prev, from the batch after recording prev; the hot state
// forgets the row key belongs to.
func (t *txn) del(key, prev []byte) error {
	if t.b == nil {
		return errors.New("pebble: write in a read-only transaction")
	}
	if t.hot != nil {
		t.hot.invalidate(key)
	}
	t.undo.record(key, prev, true)
	if err := t.b.Delete(key, nil); err != nil {
		return fmt.Errorf("%w: pebble: write: %w", store.ErrUnavailable, err)
	}
	return nil
}

func notFound(format string, args ...any) error {
	return fmt.Errorf("pebble: %s: %w", fmt.Sprintf(format, args...), store.ErrNotFound)
}

func exists(format string, args ...any) error {
	return fmt.Errorf("pebble: %s: %w", fmt.Sprintf(format, args...), store.ErrExists)
}

func corrupt(err error, format string, args ...any) error {
	return fmt.Errorf("%w: pebble: %s: %w", store.ErrUnavailable, fmt.Sprintf(format, args...), err)
}

// User implements store.UserReader.
func (r readTx) User(ctx context.Context, id string) (store.User, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return store.User{}, err
	}
	t.key = userKey(t.key[:0], id)
	v, found, err := t.get(t.key)
	if err != nil {
		return store.User{}, err
	}
	if !found {
		return store.User{}, notFound("user %q", id)
	}
	u, err := decodeUser(v, id)
	if err != nil {
		return store.User{}, corrupt(err, "user %q", id)
	}
	return u, nil
}

// CreateUser implements store.UserWriter. It also creates the user's event log bounds.
func (w writeTx) CreateUser(ctx context.Context, u store.User) error {
	t := w.t
	if err := t.check(ctx); err != nil {
		return err
	}
	t.key = userKey(t.key[:0], u.ID)
	n := len(t.key)
	t.key = boundsKey(t.key, u.ID)
	uk, bk := t.key[:n], t.key[n:]
	if found, err := t.exists(uk); err != nil || found {
		if err == nil {
			err = exists("create user %q", u.ID)
		}
		return err
	}
	t.enc = encodeUser(t.enc[:0], u)
	if err := t.set(uk, t.enc, nil, false); err != nil {
		return err
	}
	t.enc = encodeBounds(t.enc[:0], store.CursorBounds{})
	return t.set(bk, t.enc, nil, false) // exists exactly when the user does
}

// SetTokenGen implements store.UserWriter.
func (w writeTx) SetTokenGen(ctx context.Context, id string, gen int64) error {
	u, err := w.User(ctx, id)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return notFound("set token generation of user %q", id)
		}
		return err
	}
	t := w.t
	u.TokenGen = gen
	t.enc = encodeUser(t.enc[:0], u)
	return t.set(t.key, t.enc, t.val, true) // t.key and t.val are still the user's
}

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

// newest reads the conversation's latest message. Messages are never deleted (a recall
// rewrites one), so its seq is the conversation's max_seq.
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

// indexReadFanout adds (on) or removes every member of the conversation to or from the
// index of read-fanout memberships (key R), when the conversation switches mode.
func (t *txn) indexReadFanout(convID string, on bool) error {
	ms, err := t.storedMembers(convID)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if err := t.setReadFanout(m.UserID, convID, on); err != nil {
			return err
		}
	}
	return nil
}

// setReadFanout writes or removes the index entry of user's membership of the read-fanout
// conversation convID.
func (t *txn) setReadFanout(user, convID string, on bool) error {
	t.key = readFanoutKey(t.key[:0], user, convID)
	_, found, err := t.get(t.key)
	switch {
	case err != nil || found == on:
		return err
	case on:
		return t.set(t.key, nil, nil, false)
	}
	return t.del(t.key, nil)
}

// ReadFanoutChanges implements store.MarkReader.
func (r readTx) ReadFanoutChanges(ctx context.Context, userID string, after int64) ([]store.Membership, int64, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return nil, 0, err
	}
	prefix := appendStr([]byte{tReadFanout}, userID)
	it, err := t.iter(prefix, prefixEnd(prefix))
	if err != nil {
		return nil, 0, err
	}
	var convs []string
	for valid := it.First(); valid; valid = it.Next() {
		conv, _, err := readStr(it.Key()[len(prefix):])
		if err != nil {
			return nil, 0, errors.Join(corrupt(err, "read-fanout memberships of user %q", userID), it.Close())
		}
		convs = append(convs, conv)
	}
	if err := closeIter(it); err != nil {
		return nil, 0, err
	}
	var out []store.Membership
	for _, conv := range convs {
		c, err := t.storedConversation(conv)
		if err != nil {
			return nil, 0, err // the index entry exists exactly when the member row does
		}
		if c.Mark <= after {
			continue
		}
		m, err := t.storedMember(conv, userID)
		if err != nil {
			return nil, 0, err
		}
		n, err := t.newest(conv)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, store.Membership{Member: n.member(m), Conversation: n.conversation(c)})
	}
	mark, err := t.lastMark()
	return out, mark, err
}

// lastMark reads the store's latest mark (0 before the first).
func (t *txn) lastMark() (int64, error) {
	v, found, err := t.get([]byte{tMark})
	if err != nil || !found {
		return 0, err
	}
	d := decoder{b: v}
	mark := d.varint()
	if err := d.done(); err != nil {
		return 0, corrupt(err, "the latest mark")
	}
	return mark, nil
}

// Member implements store.MemberReader.
func (r readTx) Member(ctx context.Context, convID, userID string) (store.Member, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return store.Member{}, err
	}
	m, err := t.storedMember(convID, userID)
	if err != nil {
		return m, err
	}
	n, err := t.newest(convID) // an iterator: t.val keeps the row for AdvancePositions
	return n.member(m), err
}

// storedMember reads the member row as stored, without what the newest message implies;
// t.val holds the encoded row on return.
func (t *txn) storedMember(convID, userID string) (store.Member, error) {
	t.key = memberKey(t.key[:0], convID, userID)
	v, found, err := t.get(t.key)
	if err != nil {
		return store.Member{}, err
	}
	if !found {
		return store.Member{}, notFound("member %q of conversation %q", userID, convID)
	}
	m, err := decodeMember(v, convID, userID)
	if err != nil {
		return store.Member{}, corrupt(err, "member %q of conversation %q", userID, convID)
	}
	return m, nil
}

// Members implements store.MemberReader.
func (r readTx) Members(ctx context.Context, convID string) ([]store.Member, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return nil, err
	}
	ms, err := t.storedMembers(convID)
	if err != nil {
		return nil, err
	}
	return t.asNewest(convID, ms)
}

// asNewest returns the stored rows ms of convID's members with what its newest message
// implies (latest.member).
func (t *txn) asNewest(convID string, ms []store.Member) ([]store.Member, error) {
	n, err := t.newest(convID)
	for i := range ms {
		ms[i] = n.member(ms[i])
	}
	return ms, err
}

// moveStanding moves user's entry in the standing index from ordinal from to ordinal to.
func (t *txn) moveStanding(convID, userID string, from, to int64) error {
	t.key = standingKey(t.key[:0], convID, from, userID)
	if err := t.del(t.key, nil); err != nil {
		return err
	}
	t.key = standingKey(t.key[:0], convID, to, userID)
	return t.set(t.key, nil, nil, false)
}

// MembersAfter implements store.MemberReader: it scans the standing index o from after,
// reading only the rows of the page.
func (r readTx) MembersAfter(ctx context.Context, convID string, after int64, limit int) ([]store.Member, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return nil, err
	}
	prefix := appendStr([]byte{tStanding}, convID)
	ms, err := t.indexedMembers(convID, prefix, appendInt(slices.Clip(prefix), after+1), limit, "standing", func(k []byte) (string, error) {
		_, rest, err := readInt(k)
		if err != nil {
			return "", err
		}
		user, _, err := readStr(rest)
		return user, err
	})
	if err != nil {
		return nil, err
	}
	return t.asNewest(convID, ms)
}

// LastOrdinal implements store.MemberReader: the last key of the standing index.
func (r readTx) LastOrdinal(ctx context.Context, convID string) (int64, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return 0, err
	}
	prefix := appendStr([]byte{tStanding}, convID)
	it, err := t.iter(prefix, prefixEnd(prefix))
	if err != nil {
		return 0, err
	}
	var last int64
	if it.Last() {
		if last, _, err = readInt(it.Key()[len(prefix):]); err != nil {
			return 0, errors.Join(corrupt(err, "standing of conversation %q", convID), it.Close())
		}
	}
	return last, closeIter(it)
}

// indexedMembers reads, as stored, the rows of the members of convID that an index names:
// its keys from lower to the end of prefix, at most limit of them (all when limit < 0),
// userOf reading the user from what follows prefix in a key.
func (t *txn) indexedMembers(convID string, prefix, lower []byte, limit int, index string, userOf func([]byte) (string, error)) ([]store.Member, error) {
	it, err := t.iter(lower, prefixEnd(prefix))
	if err != nil {
		return nil, err
	}
	var users []string
	for valid := it.First(); valid && (limit < 0 || len(users) < limit); valid = it.Next() {
		user, err := userOf(it.Key()[len(prefix):])
		if err != nil {
			return nil, errors.Join(corrupt(err, "%s of conversation %q", index, convID), it.Close())
		}
		users = append(users, user)
	}
	if err := closeIter(it); err != nil {
		return nil, err
	}
	ms := make([]store.Member, 0, len(users))
	for _, user := range users {
		m, err := t.storedMember(convID, user)
		if err != nil {
			return nil, err // an index entry without its row is corrupt, not "not found"
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// storedMembers reads the conversation's member rows as stored, in Members order.
func (t *txn) storedMembers(convID string) ([]store.Member, error) {
	prefix := appendStr([]byte{tRoster}, convID)
	ms, err := t.indexedMembers(convID, prefix, prefix, -1, "roster", func(k []byte) (string, error) {
		user, _, err := readStr(k)
		return user, err
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ms, func(a, b store.Member) int {
		return cmp.Or(cmp.Compare(a.Ordinal, b.Ordinal), cmp.Compare(a.UserID, b.UserID))
	})
	return ms, nil
}

// Memberships implements store.MemberReader. Like the SQL join it replaces, it leaves out
// a membership whose conversation does not exist.
func (r readTx) Memberships(ctx context.Context, userID string) ([]store.Membership, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return nil, err
	}
	prefix := appendStr([]byte{tMemberByUser}, userID)
	it, err := t.iter(prefix, prefixEnd(prefix))
	if err != nil {
		return nil, err
	}
	var convs []string
	for valid := it.First(); valid; valid = it.Next() {
		conv, _, err := readStr(it.Key()[len(prefix):])
		if err != nil {
			return nil, errors.Join(corrupt(err, "memberships of user %q", userID), it.Close())
		}
		convs = append(convs, conv)
	}
	if err := closeIter(it); err != nil {
		return nil, err
	}
	var out []store.Membership
	for _, conv := range convs {
		m, err := t.storedMember(conv, userID)
		if err != nil {
			return nil, err // the index entry exists exactly when the member row does
		}
		c, err := t.storedConversation(conv)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		n, err := t.newest(conv)
		if err != nil {
			return nil, err
		}
		out = append(out, store.Membership{Member: n.member(m), Conversation: n.conversation(c)})
	}
	return out, nil
}

// PutMember implements store.MemberWriter.
func (w writeTx) PutMember(ctx context.Context, m store.Member) error {
	t := w.t
	if err := t.check(ctx); err != nil {
		return err
	}
	t.key = memberKey(t.key[:0], m.ConvID, m.UserID)
	n := len(t.key)
	t.key = memberByUserKey(t.key, m.UserID, m.ConvID)
	mk, ik := t.key[:n], t.key[n:]
	prev, found, err := t.get(mk)
	if err != nil {
		return err
	}
	oldOrdinal := int64(0)
	if found {
		was, err := decodeMember(prev, m.ConvID, m.UserID)
		if err != nil {
			return corrupt(err, "member %q of conversation %q", m.UserID, m.ConvID)
		}
		oldOrdinal = was.Ordinal
	}
	t.enc = encodeMember(t.enc[:0], m)
	if err := t.set(mk, t.enc, prev, found); err != nil {
		return err
	}
	if found {
		if oldOrdinal == m.Ordinal {
			return nil // the index entries are there already
		}
		return t.moveStanding(m.ConvID, m.UserID, oldOrdinal, m.Ordinal)
	}
	if err := t.set(ik, nil, nil, false); err != nil {
		return err
	}
	t.key = rosterKey(t.key[:0], m.ConvID, m.UserID)
	if err := t.set(t.key, nil, nil, false); err != nil {
		return err
	}
	t.key = standingKey(t.key[:0], m.ConvID, m.Ordinal, m.UserID)
	if err := t.set(t.key, nil, nil, false); err != nil {
		return err
	}
	c, err := t.storedConversation(m.ConvID)
	if errors.Is(err, store.ErrNotFound) || err == nil && !c.ReadFanout() {
		return nil
	} else if err != nil {
		return err
	}
	return t.setReadFanout(m.UserID, m.ConvID, true)
}

// AdvancePositions implements store.MemberWriter. The single writer serializes it with
// every other write of the member, so reading the row and writing the larger positions back
// is atomic.
func (w writeTx) AdvancePositions(ctx context.Context, convID, userID string, readSeq, deliveredSeq int64) (store.Member, bool, error) {
	m, err := w.Member(ctx, convID, userID)
	if err != nil {
		return m, false, err
	}
	if readSeq <= m.ReadSeq && deliveredSeq <= m.DeliveredSeq {
		return m, false, nil
	}
	m.ReadSeq, m.DeliveredSeq = max(m.ReadSeq, readSeq), max(m.DeliveredSeq, deliveredSeq)
	t := w.t
	prev := slices.Clone(t.val) // the row Member read
	t.key = memberKey(t.key[:0], convID, userID)
	t.enc = encodeMember(t.enc[:0], m)
	return m, true, t.set(t.key, t.enc, prev, true)
}

// DeleteMember implements store.MemberWriter.
func (w writeTx) DeleteMember(ctx context.Context, convID, userID string) error {
	t := w.t
	if err := t.check(ctx); err != nil {
		return err
	}
	t.key = memberKey(t.key[:0], convID, userID)
	n := len(t.key)
	t.key = memberByUserKey(t.key, userID, convID)
	mk, ik := t.key[:n], t.key[n:]
	prev, found, err := t.get(mk)
	if err != nil {
		return err
	}
	if !found {
		return notFound("delete member %q of conversation %q", userID, convID)
	}
	m, err := decodeMember(prev, convID, userID)
	if err != nil {
		return corrupt(err, "member %q of conversation %q", userID, convID)
	}
	if err := t.del(mk, prev); err != nil {
		return err
	}
	if err := t.del(ik, nil); err != nil {
		return err
	}
	t.key = rosterKey(t.key[:0], convID, userID) // mk and ik are done with: t.key is free
	if err := t.del(t.key, nil); err != nil {
		return err
	}
	t.key = standingKey(t.key[:0], convID, m.Ordinal, userID)
	if err := t.del(t.key, nil); err != nil {
		return err
	}
	return t.setReadFanout(userID, convID, false)
}

// Message implements store.MessageReader.
func (r readTx) Message(ctx context.Context, convID string, seq int64) (store.Message, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return store.Message{}, err
	}
	m, found, err := t.message(convID, seq)
	if err != nil {
		return store.Message{}, err
	}
	if !found {
		return store.Message{}, notFound("message %q/%d", convID, seq)
	}
	return m, nil
}

// message reads the message (convID, seq); t.key and t.val are left holding its key and
// encoded row.
func (t *txn) message(convID string, seq int64) (store.Message, bool, error) {
	t.key = messageKey(t.key[:0], convID, seq)
	v, found, err := t.get(t.key)
	if err != nil || !found {
		return store.Message{}, false, err
	}
	m, err := decodeMessage(v, convID, seq)
	if err != nil {
		return store.Message{}, false, corrupt(err, "message %q/%d", convID, seq)
	}
	return m, true, nil
}

// MessageByClientID implements store.MessageReader.
func (r readTx) MessageByClientID(ctx context.Context, senderID, clientMsgID string) (store.Message, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return store.Message{}, err
	}
	t.key = clientIDKey(t.key[:0], senderID, clientMsgID)
	ref, found, err := t.get(t.key)
	if err != nil {
		return store.Message{}, err
	}
	if !found {
		return store.Message{}, notFound("message %q of sender %q", clientMsgID, senderID)
	}
	conv, rest, err := readStr(ref)
	var seq int64
	if err == nil {
		seq, rest, err = readInt(rest)
	}
	if err == nil && len(rest) != 0 {
		err = errCorrupt
	}
	if err != nil {
		return store.Message{}, corrupt(err, "message %q of sender %q", clientMsgID, senderID)
	}
	m, found, err := t.message(conv, seq)
	if err != nil {
		return store.Message{}, err
	}
	if !found {
		return store.Message{}, corrupt(errCorrupt, "message %q of sender %q: index without row", clientMsgID, senderID)
	}
	return m, nil
}

// Messages implements store.MessageReader. A Limit of zero or less selects nothing.
func (r readTx) Messages(ctx context.Context, convID string, mr store.MessageRange) ([]store.Message, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return nil, err
	}
	if mr.Limit <= 0 {
		return nil, nil
	}
	prefix := appendStr([]byte{tMessage}, convID)
	var from, to int64 // seqs in [from, to) when hasTo, else [from, ∞)
	hasTo := mr.BeforeSeq > 0
	var ok bool
	if hasTo {
		from, ok = succ(mr.Floor)
		to = mr.BeforeSeq
		if !ok || from >= to {
			return nil, nil
		}
	} else if from, ok = succ(max(mr.AfterSeq, mr.Floor)); !ok {
		return nil, nil
	}
	lower := appendInt(slices.Clip(prefix), from)
	upper := prefixEnd(prefix)
	if hasTo {
		upper = appendInt(slices.Clip(prefix), to)
	}
	it, err := t.iter(lower, upper)
	if err != nil {
		return nil, err
	}
	var ms []store.Message
	step := it.Next
	valid := it.First()
	if hasTo {
		step, valid = it.Prev, it.Last() // newest first, so that the limit keeps the latest
	}
	for ; valid && len(ms) < mr.Limit; valid = step() {
		m, err := iterMessage(it, prefix, convID)
		if err != nil {
			return nil, errors.Join(corrupt(err, "messages of conversation %q", convID), it.Close())
		}
		ms = append(ms, m)
	}
	if err := closeIter(it); err != nil {
		return nil, err
	}
	if hasTo {
		slices.Reverse(ms)
	}
	return ms, nil
}

// InsertMessage implements store.MessageWriter.
func (w writeTx) InsertMessage(ctx context.Context, m store.Message) error {
	t := w.t
	if err := t.check(ctx); err != nil {
		return err
	}
	t.key = messageKey(t.key[:0], m.ConvID, m.Seq)
	n := len(t.key)
	t.key = clientIDKey(t.key, m.SenderID, m.ClientMsgID)
	gk, kk := t.key[:n], t.key[n:]
	for _, k := range [...][]byte{gk, kk} {
		if found, err := t.exists(k); err != nil || found {
			if err == nil {
				err = exists("insert message %q/%d", m.ConvID, m.Seq)
			}
			return err
		}
	}
	t.enc = encodeMessage(t.enc[:0], m)
	if err := t.set(gk, t.enc, nil, false); err != nil {
		return err
	}
	return t.set(kk, gk[1:], nil, false) // gk[1:] is enc(conv) int(seq)
}

// RecallMessage implements store.MessageWriter.
func (w writeTx) RecallMessage(ctx context.Context, convID string, seq int64) error {
	t := w.t
	if err := t.check(ctx); err != nil {
		return err
	}
	m, found, err := t.message(convID, seq)
	if err != nil {
		return err
	}
	if !found {
		return notFound("recall message %q/%d", convID, seq)
	}
	m.Content, m.Extra, m.Recalled = nil, nil, true
	t.enc = encodeMessage(t.enc[:0], m)
	return t.set(t.key, t.enc, t.val, true) // t.key and t.val are still the message's
}

// Cursors implements store.EventReader.
func (r readTx) Cursors(ctx context.Context, userID string) (store.CursorBounds, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return store.CursorBounds{}, err
	}
	b, found, err := t.cursors(userID)
	if err == nil && !found {
		err = notFound("cursors of user %q", userID)
	}
	return b, err
}

// cursors returns the user's log bounds (keys.go): Last is the highest of the stored Last,
// the Pruned bound and the newest event's cursor. found is false for an unknown user.
//
// The newest event is read before the bounds key: the writer's batch reads the live
// database, not a snapshot, and a retention pass beside it (Store.PruneEvents) may remove
// that event and raise Pruned over it in one batch between the two reads; in this order
// either read sees the cursor. t.val holds the bounds key's value on return.
func (t *txn) cursors(user string) (b store.CursorBounds, found bool, err error) {
	prefix := appendStr([]byte{tEvent}, user)
	it, err := t.iter(prefix, prefixEnd(prefix))
	if err != nil {
		return b, false, err
	}
	var newest int64
	if it.Last() {
		c, _, err := readInt(it.Key()[len(prefix):])
		if err != nil {
			return b, false, errors.Join(corrupt(err, "events of user %q", user), it.Close())
		}
		newest = c
	}
	if err := closeIter(it); err != nil {
		return b, false, err
	}
	t.key = boundsKey(t.key[:0], user)
	v, found, err := t.get(t.key)
	if err != nil || !found {
		return b, false, err
	}
	if b, err = decodeBounds(v); err != nil {
		return b, false, corrupt(err, "cursors of user %q", user)
	}
	b.Last = max(b.Last, b.Pruned, newest)
	return b, true, nil
}

// AppendEvent implements store.EventWriter. The single writer serializes every
// AppendEvent, so cursors are gapless per user; an undone request deletes its event, which
// takes the user's last cursor back with it.
func (w writeTx) AppendEvent(ctx context.Context, e store.Event) (int64, error) {
	t := w.t
	if err := t.check(ctx); err != nil {
		return 0, err
	}
	b, found, err := t.cursors(e.UserID)
	if err != nil {
		return 0, err
	}
	if !found {
		return 0, notFound("append event: user %q", e.UserID)
	}
	cursor := b.Last + 1
	// The event is new: cursor is above every cursor the user ever had. The hour hint may
	// exist; an undo leaves it, harmlessly (keys.go).
	t.key = eventKey(t.key[:0], e.UserID, cursor)
	n := len(t.key)
	t.key = eventHourKey(t.key, hourOf(e.TS), e.UserID)
	ek, hk := t.key[:n], t.key[n:]
	e.Message = nil
	t.enc = encodeEvent(t.enc[:0], e)
	if err := t.set(ek, t.enc, nil, false); err != nil {
		return 0, err
	}
	if err := t.set(hk, nil, nil, true); err != nil {
		return 0, err
	}
	return cursor, nil
}

// pruneEvents is store.Store.PruneEvents on t's batch (see Store.PruneEvents). It takes
// the hour hints (keys.go) of hours
// that begin before the bound, oldest first, and for each one removes the user's oldest
// events while their ts is before the bound: a prefix of the log, so that "every cursor
// <= Pruned is gone" holds. Events of a database written by layout 1, indexed one by one,
// go first (pruneIndexed).
func (w writeTx) pruneEvents(ctx context.Context, before int64, limit int) (int, error) {
	t := w.t
	if err := t.check(ctx); err != nil {
		return 0, err
	}
	if limit <= 0 {
		return 0, nil
	}
	removed, err := t.pruneIndexed(before, limit)
	if err != nil || removed >= limit {
		return removed, err
	}
	hints, err := t.hourHints(before, limit-removed)
	if err != nil {
		return removed, err
	}
	for _, h := range hints {
		n, done, err := t.pruneUser(h.user, before, limit-removed)
		if err != nil {
			return removed, err
		}
		removed += n
		if done && (h.hour+1)*hourMS <= before { // the whole hour is past the bound
			if err := t.del(eventHourKey(t.key[:0], h.hour, h.user), nil); err != nil {
				return removed, err
			}
		}
		if removed >= limit {
			break
		}
	}
	return removed, nil
}

// hourHint is one hour hint: user has (or had) events in hour.
type hourHint struct {
	hour int64
	user string
}

// hourHints returns up to limit hour hints of hours that begin before the bound, oldest
// first.
func (t *txn) hourHints(before int64, limit int) ([]hourHint, error) {
	it, err := t.iter([]byte{tEventByHour}, appendInt([]byte{tEventByHour}, hourOf(before)+1))
	if err != nil {
		return nil, err
	}
	var out []hourHint
	for valid := it.First(); valid && len(out) < limit; valid = it.Next() {
		hour, rest, err := readInt(it.Key()[1:])
		var user string
		if err == nil {
			user, _, err = readStr(rest)
		}
		if err != nil {
			return nil, errors.Join(corrupt(err, "prune events"), it.Close())
		}
		out = append(out, hourHint{hour: hour, user: user})
	}
	return out, closeIter(it)
}

// pruneUser removes up to limit of the user's oldest events while their ts is before the
// bound, and raises the user's Pruned bound to the last one removed. done reports that it
// stopped at an event at or past the bound, or at the end of the log, not at the limit.
func (t *txn) pruneUser(user string, before int64, limit int) (removed int, done bool, err error) {
	prefix := appendStr([]byte{tEvent}, user)
	it, err := t.iter(prefix, prefixEnd(prefix))
	if err != nil {
		return 0, false, err
	}
	type doomedEvent struct {
		cursor int64
		val    []byte
	}
	var doomed []doomedEvent
	done = true
	for valid := it.First(); valid; valid = it.Next() {
		if len(doomed) == limit {
			done = false
			break
		}
		e, v, err := iterEvent(it, prefix, user)
		if err != nil {
			return 0, false, errors.Join(corrupt(err, "prune events of user %q", user), it.Close())
		}
		if e.TS >= before {
			break
		}
		doomed = append(doomed, doomedEvent{cursor: e.Cursor, val: slices.Clone(v)}) // for the undo log
	}
	if err := closeIter(it); err != nil {
		return 0, false, err
	}
	if len(doomed) == 0 {
		return 0, done, nil
	}
	// The bounds first, while Last may still be the newest event's cursor.
	b, found, err := t.cursors(user)
	if err != nil || !found {
		return 0, false, errors.Join(err, corrupt(errCorrupt, "events of unknown user %q", user))
	}
	prev := slices.Clone(t.val) // the bounds key's value, which t.cursors read last
	b.Pruned = max(b.Pruned, doomed[len(doomed)-1].cursor)
	t.key = boundsKey(t.key[:0], user)
	t.enc = encodeBounds(t.enc[:0], b)
	if err := t.set(t.key, t.enc, prev, true); err != nil {
		return 0, false, err
	}
	for _, d := range doomed {
		t.key = eventKey(t.key[:0], user, d.cursor)
		if err := t.del(t.key, d.val); err != nil {
			return 0, false, err
		}
	}
	return len(doomed), done, nil
}

// pruneIndexed is PruneEvents over the per-event time index of layout 1. After removing
// the oldest events it also removes any event of an affected user at or below the new
// Pruned bound that a clock step backwards left with a later ts, so that "every cursor <=
// Pruned is gone" holds; such stragglers count in the result and may take it past limit
// (as in the SQLite backend).
func (t *txn) pruneIndexed(before int64, limit int) (int, error) {
	oldest, err := t.oldestEvents(before, limit)
	if err != nil {
		return 0, err
	}
	highest := make(map[string]int64)
	for _, o := range oldest {
		if err := t.removeEvent(o.user, o.cursor, o.ts, true); err != nil {
			return 0, err
		}
		if c, ok := highest[o.user]; !ok || o.cursor > c {
			highest[o.user] = o.cursor
		}
	}
	removed := len(oldest)
	for _, user := range slices.Sorted(maps.Keys(highest)) {
		n, err := t.raisePruned(user, highest[user])
		if err != nil {
			return 0, err
		}
		removed += n
	}
	return removed, nil
}

// timeEntry is one entry of the events-by-time index.
type timeEntry struct {
	ts     int64
	user   string
	cursor int64
}

// oldestEvents returns up to limit entries of the time index with ts < before, oldest
// first (by ts, then user, then cursor).
func (t *txn) oldestEvents(before int64, limit int) ([]timeEntry, error) {
	lower := []byte{tEventByTime}
	it, err := t.iter(lower, appendInt([]byte{tEventByTime}, before))
	if err != nil {
		return nil, err
	}
	var out []timeEntry
	for valid := it.First(); valid && len(out) < limit; valid = it.Next() {
		ts, rest, err := readInt(it.Key()[1:])
		var e timeEntry
		if err == nil {
			e.ts = ts
			e.user, rest, err = readStr(rest)
		}
		if err == nil {
			e.cursor, _, err = readInt(rest)
		}
		if err != nil {
			return nil, errors.Join(corrupt(err, "prune events"), it.Close())
		}
		out = append(out, e)
	}
	return out, closeIter(it)
}

// removeEvent deletes the event (user, cursor) and its time index entry. indexed says the
// index entry is known to exist (it was just read); otherwise it is looked up.
func (t *txn) removeEvent(user string, cursor, ts int64, indexed bool) error {
	t.key = eventKey(t.key[:0], user, cursor)
	n := len(t.key)
	t.key = eventByTimeKey(t.key, ts, user, cursor)
	ek, tk := t.key[:n], t.key[n:]
	prev, found, err := t.get(ek)
	if err != nil {
		return err
	}
	if found {
		if err := t.del(ek, prev); err != nil {
			return err
		}
	}
	if !indexed {
		if indexed, err = t.exists(tk); err != nil {
			return err
		}
	}
	if indexed {
		return t.del(tk, nil)
	}
	return nil
}

// raisePruned removes the user's remaining events up to cursor, returning how many, and
// raises the user's Pruned bound to cursor.
func (t *txn) raisePruned(user string, cursor int64) (int, error) {
	prefix := appendStr([]byte{tEvent}, user)
	end, ok := succ(cursor)
	upper := prefixEnd(prefix)
	if ok {
		upper = appendInt(slices.Clip(prefix), end)
	}
	it, err := t.iter(prefix, upper)
	if err != nil {
		return 0, err
	}
	var stragglers []timeEntry
	for valid := it.First(); valid; valid = it.Next() {
		e, _, err := iterEvent(it, prefix, user)
		if err != nil {
			return 0, errors.Join(corrupt(err, "prune events of user %q", user), it.Close())
		}
		stragglers = append(stragglers, timeEntry{ts: e.TS, user: user, cursor: e.Cursor})
	}
	if err := closeIter(it); err != nil {
		return 0, err
	}
	for _, s := range stragglers {
		if err := t.removeEvent(s.user, s.cursor, s.ts, false); err != nil {
			return 0, err
		}
	}
	t.key = boundsKey(t.key[:0], user)
	prev, found, err := t.get(t.key)
	if err != nil || !found {
		return len(stragglers), err // events of an unknown user cannot exist
	}
	b, err := decodeBounds(prev)
	if err != nil {
		return 0, corrupt(err, "cursors of user %q", user)
	}
	if cursor <= b.Pruned {
		return len(stragglers), nil
	}
	b.Pruned = cursor
	t.enc = encodeBounds(t.enc[:0], b)
	return len(stragglers), t.set(t.key, t.enc, prev, true)
}

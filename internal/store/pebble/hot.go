package pebble

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/parleychat/parley/internal/store"
)

// hotState is the writer's in-memory copy of what AppendMessage reads: each active
// conversation's head (its row and its members) and each active user's last cursor. With
// it a send reads nothing on the writer (its dedup key is checked by its caller: dedup.go).
//
// It describes the writer's batch, uncommitted writes included, and only the writer
// goroutine touches it. Every write through a txn (every Update) drops the entries of the
// conversation or user it touches (txn.set, txn.del), so the next AppendMessage reloads
// them from the batch; AppendMessage itself updates the entries it writes. If a commit
// fails the store refuses every later call, so the entries never describe a batch that
// was thrown away. Loaded lazily, bounded (trim), and rebuilt from the keys after a restart,
// which is all it needs: it holds nothing that is not also in the store.
//
// The batch being built reads through to the database, which holds the batch in flight
// (groupcommit.RunPipelined) only once it has committed: every read the hot state makes
// therefore first waits for that commit (settle). Whatever is held in memory is right
// whether or not the batch in flight has committed, so a send that finds everything here
// does not wait.
type hotState struct {
	convs   map[string]*convHead
	users   map[string]hotUser
	members int        // members held by all heads, for the bound
	fresh   *freshKeys // dedup keys maybe only in memtables (dedup.go)
	settle  func()     // the writer's, see groupcommit.Builder.Add
}

// The bounds of hotState, trimmed between batches. A head costs about 150 bytes per
// member, a user's bounds about 80: at most some 40 MiB in all.
const (
	maxHotMembers = 1 << 18
	maxHotUsers   = 1 << 18
)

// hotUser is one user's log as AppendMessage needs it.
type hotUser struct {
	last int64 // the last cursor
	hour int64 // the hour of the last hour hint written (keys.go); noHour when not known
}

const noHour = math.MinInt64

// convHead is one conversation as AppendMessage needs it: the conversation and its members
// as readers see them (Conversation, Members), and what is stored of the rows that
// AppendMessage does not rewrite. The conversation row is stored with a max_seq and an
// activity time that may lag behind the newest message, and the newest message's sender's
// row with positions that may lag behind it: both are implied by that message (txn.newest).
// Every other member's row is stored as held.
type convHead struct {
	conv    store.Conversation
	members []store.Member // in Members order
	index   map[string]int // user -> position in members, for large conversations only

	sender       string       // who sent the newest message; "" when none
	senderStored store.Member // sender's row as stored, if sender is a member
	senderIn     bool         // sender is a member

	// rows holds, for a read-fanout conversation (whose members are not all loaded), the
	// stored rows of the members who sent lately, as they are stored: every write of one of
	// the conversation's member rows by an Update drops the head, AppendMessage updates it.
	rows map[string]store.Member
	// stored is a read-fanout conversation's row as stored: AppendMessage rewrites it there,
	// for its mark.
	stored store.Conversation
}

// maxReadRows bounds convHead.rows: past it the rows are forgotten and read again.
const maxReadRows = 1024

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

func newHotState(rotate int) hotState {
	return hotState{convs: make(map[string]*convHead), users: make(map[string]hotUser),
		fresh: newFreshKeys(rotate)}
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
	case tConversation, tMember, tRoster, tMessage: // a message is the head's newest, or was
		if id, _, err := readStr(key[1:]); err == nil {
			h.dropConv(id)
		} else {
			clear(h.convs) // cannot happen: keys are built by keys.go
			h.members = 0
		}
	case tBounds, tEvent:
		if id, _, err := readStr(key[1:]); err == nil {
			h.dropUser(id)
		} else {
			clear(h.users)
		}
	case tClientID:
		h.fresh.add(string(key)) // a message stored by an Update, not AppendMessage
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
	h.settle()
	if err := t.check(ctx); err != nil {
		return nil, err
	}
	c, err := t.storedConversation(id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	n, err := t.newest(id)
	if err != nil {
		return nil, err
	}
	head := &convHead{conv: n.conversation(c), sender: n.sender}
	if c.ReadFanout() {
		// Its members are not loaded: a send reads only its sender's row (readRow).
		head.rows, head.stored = make(map[string]store.Member), c
		if n.sender != "" {
			if _, _, err := head.readRow(ctx, t, h.settle, n.sender); err != nil && !errors.Is(err, store.ErrNotMember) {
				return nil, err
			}
		}
		h.convs[id] = head
		return head, nil
	}
	ms, err := t.storedMembers(id)
	if err != nil {
		return nil, err
	}
	head.members = ms
	for i := range ms {
		if ms[i].UserID == n.sender {
			head.senderStored, head.senderIn = ms[i], true
			ms[i] = n.member(ms[i])
		}
	}
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

// readRow returns member user's row of a read-fanout conversation as readers see it, and
// as stored, reading it through t (after settle) when not held. ErrNotMember if user is not
// a member.
func (c *convHead) readRow(ctx context.Context, t *txn, settle func(), user string) (mem, stored store.Member, err error) {
	stored, ok := c.rows[user]
	if !ok {
		settle()
		if err := t.check(ctx); err != nil {
			return mem, stored, err
		}
		stored, err = t.storedMember(c.conv.ID, user)
		if errors.Is(err, store.ErrNotFound) {
			return mem, stored, store.ErrNotMember
		}
		if err != nil {
			return mem, stored, err
		}
		if len(c.rows) >= maxReadRows {
			clear(c.rows)
		}
		c.rows[user] = stored
	}
	if user == c.sender {
		c.senderStored, c.senderIn = stored, true
		return latest{seq: c.conv.MaxSeq, sender: user}.member(stored), stored, nil
	}
	return stored, stored, nil
}

// user returns the user's log, reading it through t when not held.
func (h *hotState) user(ctx context.Context, t *txn, id string) (hotUser, error) {
	if u, ok := h.users[id]; ok {
		return u, nil
	}
	h.settle()
	b, err := readTx{t}.Cursors(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		// A member who is not a user: the rows disagree, which no Update can cause.
		return hotUser{}, corrupt(errCorrupt, "member %q of a conversation is not a user", id)
	}
	if err != nil {
		return hotUser{}, err
	}
	u := hotUser{last: b.Last, hour: noHour}
	h.users[id] = u
	return u, nil
}

// appendMessage is AppendMessage on the writer goroutine (see store.Appended). Everything
// that can fail is done before the first write; the writes go through t.set like any
// Update's, with their previous values taken from the hot state, so that a panic midway is
// undone like a failed Update. The hot state is updated only after the last write.
func (w *writer) appendMessage(ctx context.Context, t *txn, m store.Message, pre precheck) (store.Appended, error) {
	if err := t.check(ctx); err != nil {
		return store.Appended{}, err
	}
	t.key = clientIDKey(t.key[:0], m.SenderID, m.ClientMsgID)
	dedup := string(t.key)
	fresh, epoch := w.hot.fresh.has(dedup)
	if fresh || !pre.ok || pre.found || pre.epoch != epoch {
		// Maybe a retry: read the key, from the database once the batch in flight (which
		// may hold the original) has committed, or from the batch being built.
		w.settle()
		if orig, err := (readTx{t}).MessageByClientID(ctx, m.SenderID, m.ClientMsgID); err == nil {
			return store.Appended{Message: orig, Duplicate: true}, nil
		} else if !errors.Is(err, store.ErrNotFound) {
			return store.Appended{}, err
		}
	}
	h, err := w.hot.head(ctx, t, m.ConvID)
	if err != nil {
		return store.Appended{}, err
	}
	if h == nil {
		return store.Appended{}, store.ErrNotMember
	}
	members := h.members
	if h.conv.ReadFanout() {
		// No events, and no row but the sender's and the previous sender's (memberWrite).
		if members, err = w.readFanoutMembers(ctx, t, h, m.SenderID); err != nil {
			return store.Appended{}, err
		}
	} else if h.member(m.SenderID) < 0 {
		return store.Appended{}, store.ErrNotMember
	}
	users := w.scratch.users[:0]
	for _, mem := range h.members {
		u, err := w.hot.user(ctx, t, mem.UserID)
		if err != nil {
			return store.Appended{}, err
		}
		users = append(users, u)
	}
	w.scratch.users = users
	var mentioned []string // read fanout: the mentioned members who get an event
	if h.conv.ReadFanout() {
		if mentioned, err = w.mentionedMembers(ctx, t, h, m); err != nil {
			return store.Appended{}, err
		}
	}
	mentionedLogs := w.scratch.mentioned[:0]
	for _, u := range mentioned {
		log, err := w.hot.user(ctx, t, u)
		if err != nil {
			return store.Appended{}, err
		}
		mentionedLogs = append(mentionedLogs, log)
	}
	w.scratch.mentioned = mentionedLogs

	// Writes. t.set records each key's previous state for the undo log.
	m.Seq = h.conv.MaxSeq + 1
	t.key = messageKey(t.key[:0], m.ConvID, m.Seq)
	n := len(t.key)
	t.key = clientIDKey(t.key, m.SenderID, m.ClientMsgID)
	gk, kk := t.key[:n], t.key[n:]
	t.enc = encodeMessage(t.enc[:0], m)
	// The message keys are new: seq is above every seq stored, and the client id key was
	// found missing.
	if err := t.setNew(gk, t.enc); err != nil {
		return store.Appended{}, err
	}
	if err := t.setNew(kk, gk[1:]); err != nil { // gk[1:] is enc(conv) int(seq)
		return store.Appended{}, err
	}
	// The conversation row is not rewritten: the message just written is the newest, and
	// implies the new max_seq and activity (txn.newest).
	conv := h.conv
	conv.MaxSeq, conv.UpdatedAt = m.Seq, max(conv.UpdatedAt, m.CreatedAt)
	if conv.ReadFanout() {
		// The conversation takes the next mark (store.MarkReader), written beside it.
		conv.Mark = w.lastMark + 1
		if err := t.setKnown(convKey(t.key[:0], conv.ID), encodeConversation(t.enc[:0], conv), encodeConversation(w.scratch.prev[:0], h.stored)); err != nil {
			return store.Appended{}, err
		}
		var prev []byte
		if w.lastMark > 0 {
			prev = appendVarint(w.scratch.prev[:0], w.lastMark)
		}
		if err := t.write([]byte{tMark}, appendVarint(t.enc[:0], conv.Mark), prev, w.lastMark > 0); err != nil {
			return store.Appended{}, err
		}
	}
	res := store.Appended{Message: m, ReadFanout: conv.ReadFanout()}
	if len(users)+len(mentioned) > 0 {
		res.Events = make([]store.Delivery, len(users), len(users)+len(mentioned))
	}
	ev := store.Event{Type: store.EventMessage, ConvID: m.ConvID, TS: m.CreatedAt, Seq: m.Seq}
	var senderStored store.Member // the sender is a member: set below
	for i, mem := range members {
		if i < len(users) { // write fanout: users and members are in the same order
			u := &users[i]
			ev.UserID = mem.UserID
			if err := appendEvent(t, u, ev); err != nil {
				return store.Appended{}, err
			}
			res.Events[i] = store.Delivery{UserID: mem.UserID, Cursor: u.last}
		}
		stored, write := memberWrite(h, mem, m)
		if write {
			after, _ := store.AfterAppend(mem, m)
			if err := t.setKnown(memberKey(t.key[:0], m.ConvID, mem.UserID), encodeMember(t.enc[:0], after), encodeMember(w.scratch.prev[:0], stored)); err != nil {
				return store.Appended{}, err
			}
			stored = after
		}
		if mem.UserID == m.SenderID {
			senderStored = stored
		}
		if h.rows != nil {
			h.rows[mem.UserID] = stored
		}
	}
	for i, u := range mentioned { // read fanout only: their rows do not change
		ev.UserID = u
		if err := appendEvent(t, &mentionedLogs[i], ev); err != nil {
			return store.Appended{}, err
		}
		res.Events = append(res.Events, store.Delivery{UserID: u, Cursor: mentionedLogs[i].last})
	}

	// Every write is in the batch: the hot state follows.
	w.hot.fresh.add(dedup)
	h.conv, h.sender, h.senderStored, h.senderIn = conv, m.SenderID, senderStored, true
	if conv.ReadFanout() {
		h.stored, w.lastMark = conv, conv.Mark
	}
	for i, mem := range h.members {
		h.members[i], _ = store.AfterAppend(mem, m)
		w.hot.users[mem.UserID] = users[i]
	}
	for i, u := range mentioned {
		w.hot.users[u] = mentionedLogs[i]
	}
	return res, nil
}

// mentionedMembers returns the users of m's mentions who are members of the read-fanout
// conversation h and not the sender (store.MentionedUsers), reading their rows through t
// when not held: each gets m as an event in their log.
func (w *writer) mentionedMembers(ctx context.Context, t *txn, h *convHead, m store.Message) ([]string, error) {
	var out []string
	for _, u := range store.MentionedUsers(m) {
		_, _, err := h.readRow(ctx, t, w.settle, u)
		switch {
		case errors.Is(err, store.ErrNotMember): // only stored with the message
		case err != nil:
			return nil, err
		default:
			out = append(out, u)
		}
	}
	return out, nil
}

// readFanoutMembers returns the member rows, as readers see them, that appending a message
// from sender to the read-fanout conversation h may rewrite: the previous newest message's
// sender's (if a member, and another user) and sender's. ErrNotMember if sender is not one.
func (w *writer) readFanoutMembers(ctx context.Context, t *txn, h *convHead, sender string) ([]store.Member, error) {
	var out []store.Member
	if h.sender != "" && h.sender != sender && h.senderIn {
		out = append(out, latest{seq: h.conv.MaxSeq, sender: h.sender}.member(h.senderStored))
	}
	mem, _, err := h.readRow(ctx, t, w.settle, sender)
	if err != nil {
		return nil, err
	}
	return append(out, mem), nil
}

// memberWrite says whether appending m rewrites member mem's row (mem as Members reads it),
// and returns the row as stored. The sender's row is written only when it was hidden: its
// new positions are implied by m, the newest message. The previous newest message's
// sender's positions were implied by that message, which m replaces, so they are written
// down. Any other row changes only if the member had hidden the conversation.
func memberWrite(h *convHead, mem store.Member, m store.Message) (stored store.Member, write bool) {
	stored = mem
	if mem.UserID == h.sender {
		stored = h.senderStored
	}
	after, changed := store.AfterAppend(mem, m)
	switch mem.UserID {
	case m.SenderID:
		return stored, stored.Hidden
	case h.sender:
		return stored, after != stored
	}
	return stored, changed
}

// appendEvent writes ev as the next event of its user, whose log is *u (advanced here),
// like AppendEvent but with the last cursor from the hot state, and the hour hint only
// when the hour changed.
func appendEvent(t *txn, u *hotUser, ev store.Event) error {
	u.last++
	t.key = eventKey(t.key[:0], ev.UserID, u.last)
	if err := t.setNew(t.key, encodeEvent(t.enc[:0], ev)); err != nil {
		return err
	}
	if hour := hourOf(ev.TS); hour != u.hour {
		// May exist already: the undo then rewrites it, empty as it was.
		if err := t.setKnown(eventHourKey(t.key[:0], hour, ev.UserID), nil, nil); err != nil {
			return err
		}
		u.hour = hour
	}
	return nil
}

// appendScratch are the writer's buffers for appendMessage, reused from send to send.
type appendScratch struct {
	users     []hotUser
	mentioned []hotUser
	prev      []byte
}

// AppendMessage implements store.Store: StartAppend, then Wait.
func (s *Store) AppendMessage(ctx context.Context, m store.Message) (store.Appended, error) {
	return store.StartAndWait(ctx, s, m)
}

// StartAppend implements store.Store: the append runs on the writer goroutine, in the
// group commit of concurrent Updates, with the conversation's head and its members' cursors
// from the writer's memory (hotState), in the order the StartAppend calls queued it.
//
// The caller's goroutine first looks the dedup key up in the database (precheck), in
// parallel with other callers and the writer, so that the writer only applies. An earlier
// append still in flight with the same key is not in the database yet, but it is in the
// writer's set of fresh keys by the time the writer reaches this one, which sends this one
// down the writer's own lookup.
func (s *Store) StartAppend(ctx context.Context, m store.Message) (store.PendingAppend, error) {
	if err := s.failedErr(); err != nil {
		return nil, err
	}
	pre := s.precheck(m)
	return s.q.StartAppend(ctx, true, func(tx store.Tx) (store.Appended, error) {
		w, ok := tx.(writeTx)
		if !ok {
			return store.Appended{}, fmt.Errorf("pebble: AppendMessage got a %T", tx)
		}
		return s.w.appendMessage(ctx, w.t, m, pre)
	})
}

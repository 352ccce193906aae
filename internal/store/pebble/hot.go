package pebble

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/parleychat/parley/internal/store"
)

// hotState is the writer's in-memory copy of what AppendMessage reads: each active
// conversation's head (its row and its members), each active user's last cursor, and the
// rows of the attachments sent lately. With
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
	atts    map[string]store.Attachment // attachment rows as the batch has them
	members int                         // members held by all heads, for the bound
	fresh   *freshKeys                  // dedup keys maybe only in memtables (dedup.go)
	settle  func()                      // the writer's, see groupcommit.Builder.Add
}

// The bounds of hotState, trimmed between batches. A head costs about 150 bytes per
// member, a user's bounds about 80: at most some 40 MiB in all.
const (
	maxHotMembers     = 1 << 18
	maxHotUsers       = 1 << 18
	maxHotAttachments = 1 << 16 // about 300 bytes each
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
		atts: make(map[string]store.Attachment), fresh: newFreshKeys(rotate)}
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
	case tAttachment:
		if id, _, err := readStr(key[1:]); err == nil {
			delete(h.atts, id)
		} else {
			clear(h.atts)
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
	for id := range h.atts {
		if len(h.atts) <= maxHotAttachments {
			break
		}
		delete(h.atts, id)
	}
}

// attachment returns the attachment row id as the batch has it (earlier appends of the
// batch counted), reading it through t when not held; found is false when there is none,
// which is not held: a refused send is rare.
func (h *hotState) attachment(ctx context.Context, t *txn, id string) (a store.Attachment, found bool, err error) {
	if a, ok := h.atts[id]; ok {
		return a, true, nil
	}
	h.settle()
	if err := t.check(ctx); err != nil {
		return a, false, err
	}
	if a, found, err = t.attachment(id); err != nil || !found {
		return a, false, err
	}
	h.atts[id] = a
	return a, true, nil
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

// appendMessage is AppendMessage on the writer goroutine: it loads what store.DecideAppend
// reads, from the hot state where it can, and writes the plan. Everything that can fail is
// done before the first write; the writes go through t.set like any Update's, with their
// previous values taken from the hot state, so that a panic midway is undone like a failed
// Update. The hot state is updated only after the last write.
func (w *writer) appendMessage(ctx context.Context, t *txn, m store.Message, pre precheck) (store.Appended, error) {
	if err := t.check(ctx); err != nil {
		return store.Appended{}, err
	}
	t.key = clientIDKey(t.key[:0], m.SenderID, m.ClientMsgID)
	dedup := string(t.key)
	v, h, err := w.loadAppend(ctx, t, m, pre, dedup)
	if err != nil {
		return store.Appended{}, err
	}
	p := &w.scratch.plan
	if err := store.DecideAppend(m, v, p); err != nil || p.Duplicate {
		return p.Appended, err
	}
	if err := w.writeAppend(t, h, p); err != nil {
		return store.Appended{}, err
	}
	w.hot.fresh.add(dedup)
	return p.Appended, nil
}

// loadAppend fills the writer's view for m (store.AppendView), stopping where the rule
// will, and returns the conversation's head (nil when there is none).
func (w *writer) loadAppend(ctx context.Context, t *txn, m store.Message, pre precheck, dedup string) (*store.AppendView, *convHead, error) {
	v := &w.scratch.view
	*v = store.AppendView{Logs: v.Logs[:0]}
	fresh, epoch := w.hot.fresh.has(dedup)
	if fresh || !pre.ok || pre.found || pre.epoch != epoch {
		// Maybe a retry: read the key, from the database once the batch in flight (which
		// may hold the original) has committed, or from the batch being built.
		w.settle()
		if orig, err := (readTx{t}).MessageByClientID(ctx, m.SenderID, m.ClientMsgID); err == nil {
			v.Original = &orig
			return v, nil, nil
		} else if !errors.Is(err, store.ErrNotFound) {
			return nil, nil, err
		}
	}
	h, err := w.hot.head(ctx, t, m.ConvID)
	if err != nil || h == nil {
		return v, nil, err
	}
	v.Conv = &h.conv
	users := w.scratch.users[:0]
	if h.conv.ReadFanout() {
		sender, _, err := h.readRow(ctx, t, w.settle, m.SenderID)
		if errors.Is(err, store.ErrNotMember) {
			return v, h, nil
		} else if err != nil {
			return nil, nil, err
		}
		w.scratch.sender = sender
		v.Sender = &w.scratch.sender
		if v.Mentioned, err = w.mentionedMembers(ctx, t, h, m); err != nil {
			return nil, nil, err
		}
		v.LastMark = w.lastMark
		for _, u := range v.Mentioned {
			log, err := w.hot.user(ctx, t, u)
			if err != nil {
				return nil, nil, err
			}
			users = append(users, log)
		}
	} else {
		i := h.member(m.SenderID)
		if i < 0 {
			return v, h, nil
		}
		v.Sender, v.Members = &h.members[i], h.members
		for _, mem := range h.members {
			log, err := w.hot.user(ctx, t, mem.UserID)
			if err != nil {
				return nil, nil, err
			}
			users = append(users, log)
		}
	}
	w.scratch.users = users
	for _, u := range users {
		v.Logs = append(v.Logs, u.last)
	}
	if m.AttachmentID != "" { // only then: a plain send reads nothing more
		a, found, err := w.hot.attachment(ctx, t, m.AttachmentID)
		if err != nil {
			return nil, nil, err
		}
		if found {
			w.scratch.att = a
			v.Attachment = &w.scratch.att
		}
	}
	return v, h, nil
}

// writeAppend writes plan p of an append to conversation h through t, then brings the hot
// state up to it.
func (w *writer) writeAppend(t *txn, h *convHead, p *store.AppendPlan) error {
	m := &p.Message
	t.key = messageKey(t.key[:0], m.ConvID, m.Seq)
	n := len(t.key)
	t.key = clientIDKey(t.key, m.SenderID, m.ClientMsgID)
	gk, kk := t.key[:n], t.key[n:]
	t.enc = encodeMessage(t.enc[:0], *m)
	// The message keys are new: seq is above every seq stored, and the client id key was
	// found missing.
	if err := t.setNew(gk, t.enc); err != nil {
		return err
	}
	if err := t.setNew(kk, gk[1:]); err != nil { // gk[1:] is enc(conv) int(seq)
		return err
	}
	if p.Attachment != nil {
		if err := w.writeCount(t, p.Attachment, m); err != nil {
			return err
		}
	}
	// A write-fanout conversation's row is not rewritten: the message just written is the
	// newest, and implies the new max_seq and activity (txn.newest).
	conv := p.Conv
	if conv.ReadFanout() {
		// The conversation takes the next mark (store.MarkReader), written beside it.
		if err := t.setKnown(convKey(t.key[:0], conv.ID), encodeConversation(t.enc[:0], conv), encodeConversation(w.scratch.prev[:0], h.stored)); err != nil {
			return err
		}
		var prev []byte
		if w.lastMark > 0 {
			prev = appendVarint(w.scratch.prev[:0], w.lastMark)
		}
		if err := t.write([]byte{tMark}, appendVarint(t.enc[:0], conv.Mark), prev, w.lastMark > 0); err != nil {
			return err
		}
	}
	users := w.scratch.users
	for i, d := range p.Events {
		if err := appendEvent(t, &users[i], p.Event(d)); err != nil {
			return err
		}
	}
	// Member rows: the plan's, and in a read-fanout conversation first the previous newest
	// message's sender's, whose positions that message implied and m no longer does.
	var senderStored store.Member // the sender is a member: set below
	put := func(mem, after store.Member, changed bool) error {
		stored, write := memberWrite(h, mem, after, changed, m.SenderID)
		if write {
			if err := t.setKnown(memberKey(t.key[:0], m.ConvID, mem.UserID), encodeMember(t.enc[:0], after), encodeMember(w.scratch.prev[:0], stored)); err != nil {
				return err
			}
			stored = after
		}
		if mem.UserID == m.SenderID {
			senderStored = stored
		}
		if h.rows != nil {
			h.rows[mem.UserID] = stored
		}
		return nil
	}
	if conv.ReadFanout() {
		if h.sender != "" && h.sender != m.SenderID && h.senderIn {
			prev := latest{seq: h.conv.MaxSeq, sender: h.sender}.member(h.senderStored)
			if err := put(prev, prev, false); err != nil {
				return err
			}
		}
		if err := put(w.scratch.sender, p.After[0], p.Changed[0]); err != nil {
			return err
		}
	} else {
		for i, mem := range h.members {
			if err := put(mem, p.After[i], p.Changed[i]); err != nil {
				return err
			}
		}
	}

	// Every write is in the batch: the hot state follows.
	h.conv, h.sender, h.senderStored, h.senderIn = conv, m.SenderID, senderStored, true
	if conv.ReadFanout() {
		h.stored, w.lastMark = conv, conv.Mark
	} else {
		copy(h.members, p.After)
	}
	for i, d := range p.Events {
		w.hot.users[d.UserID] = users[i]
	}
	if a := p.Attachment; a != nil {
		w.hot.atts[a.ID] = *a
	}
	return nil
}

// writeCount counts message m in its attachment, whose row the append read as
// w.scratch.att and leaves as after: the row, the message's reference, and the idle entry
// gone if this is the attachment's first reference (keys.go).
func (w *writer) writeCount(t *txn, after *store.Attachment, m *store.Message) error {
	before := &w.scratch.att
	t.key = attachmentKey(t.key[:0], after.ID)
	if err := t.setKnown(t.key, encodeAttachment(t.enc[:0], *after), encodeAttachment(w.scratch.prev[:0], *before)); err != nil {
		return err
	}
	if before.Refs == 0 {
		// The hot state holds no idle entry: del's invalidation is none.
		if err := t.del(attachmentIdleKey(t.key[:0], before.IdleSince, before.ID), nil); err != nil {
			return err
		}
	}
	// New: seq is above every seq stored.
	return t.setNew(attachmentRefKey(t.key[:0], after.ID, m.ConvID, m.Seq), nil)
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

// memberWrite says whether appending a message from sender rewrites member mem's row (mem
// as Members reads it, after as the append rule leaves it, changed if they differ), and
// returns the row as stored. The sender's row is written only when it was hidden: its new
// positions are implied by the message, the newest. The previous newest message's
// sender's positions were implied by that message, which the new one replaces, so they
// are written down. Any other row is written only if the append changed it.
func memberWrite(h *convHead, mem, after store.Member, changed bool, sender string) (stored store.Member, write bool) {
	stored = mem
	if mem.UserID == h.sender {
		stored = h.senderStored
	}
	switch mem.UserID {
	case sender:
		return stored, stored.Hidden
	case h.sender:
		return stored, after != stored
	}
	return stored, changed
}

// appendEvent writes ev as the next event of its user, whose log is *u (advanced here to
// ev's cursor, which the append rule gave it), and the hour hint only when the hour
// changed.
func appendEvent(t *txn, u *hotUser, ev store.Event) error {
	u.last = ev.Cursor
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
	view   store.AppendView
	plan   store.AppendPlan
	sender store.Member     // a read-fanout conversation's sender's row, as readers see it
	att    store.Attachment // the row of the attachment the message carries, as read
	users  []hotUser        // the logs that get the event, in the order of the plan's events
	prev   []byte
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

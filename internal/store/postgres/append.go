package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/sqlrow"
)

// States of an appendReq: claimed by the appender or abandoned by its caller, never both,
// so a Wait that returns ctx's error is sure nothing was written.
const (
	reqPending int32 = iota
	reqClaimed
	reqAbandoned
)

// appendReq is one queued AppendMessage; it is the store.PendingAppend StartAppend returns.
type appendReq struct {
	ctx   context.Context
	m     store.Message
	state atomic.Int32
	done  chan struct{} // closed once res and err are set
	res   store.Appended
	err   error
}

// Wait implements store.PendingAppend.
func (r *appendReq) Wait() (store.Appended, error) {
	select {
	case <-r.done:
	case <-r.ctx.Done():
		if r.state.CompareAndSwap(reqPending, reqAbandoned) {
			return store.Appended{}, r.ctx.Err()
		}
		<-r.done
	}
	return r.res, r.err
}

func (r *appendReq) answer(res store.Appended, err error) {
	r.res, r.err = res, err
	close(r.done)
}

// appender is a node's group commit for sends. One goroutine takes every queued append (up
// to MaxBatch) and applies the batch in one transaction of two round trips:
//
//  1. lock the batch's conversations, then read the senders' member rows (locked), the
//     members of the write-fanout conversations and the mentioned members of the
//     read-fanout ones with their users (locked, all in one statement in user order), and
//     the messages the batch might repeat;
//  2. with the seqs and cursors computed here, write the messages, the conversations, the
//     users' cursors, the events and the members' positions with one set-based statement
//     each (unnest of arrays), and COMMIT.
//
// Rows are locked in one order by every batch of every node (conversations, then member
// rows, then users, each sorted by key, and the mark row last, in the second round trip),
// so batches of different nodes wait for each other but never deadlock. The lock on a
// conversation also orders duplicates: a retry that reaches another node while the first
// attempt is committing waits for that commit, then finds the message.
//
// Appends are applied in queue order, and a batch starts after the previous one has
// committed, which is StartAppend's ordering promise.
type appender struct {
	pool *pgxpool.Pool
	opts Options

	mu     sync.RWMutex // guards sending on reqs against close closing it
	closed bool
	reqs   chan *appendReq
	done   chan struct{}
}

func newAppender(pool *pgxpool.Pool, opts Options) *appender {
	a := &appender{pool: pool, opts: opts, reqs: make(chan *appendReq, 4*opts.MaxBatch), done: make(chan struct{})}
	go a.run()
	return a
}

// start queues m and returns once it is queued.
func (a *appender) start(ctx context.Context, m store.Message) (store.PendingAppend, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := &appendReq{ctx: ctx, m: m, done: make(chan struct{})}
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed {
		return nil, unavailable("append")
	}
	select {
	case a.reqs <- r:
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// close stops taking appends and waits until those queued are answered.
func (a *appender) close() {
	a.mu.Lock()
	if !a.closed {
		a.closed = true
		close(a.reqs)
	}
	a.mu.Unlock()
	<-a.done
}

// batchWaitFrom is the size of the previous batch from which the appender waits
// Options.BatchWait before the next: a load that fills batches of 8 has many senders in
// flight, whom the wait gathers; below it the wait would only add latency.
const batchWaitFrom = 8

// batchTarget is the batch size at which the appender stops waiting: a transaction costs
// the database about as much CPU as a dozen of the messages it carries (docs/design.md,
// "Several nodes: measured"), so past 32 the wait would add latency for little.
const batchTarget = 32

func (a *appender) run() {
	defer close(a.done)
	batch := make([]*appendReq, 0, a.opts.MaxBatch)
	last := 0 // the size of the previous batch
	var timer *time.Timer
	for first := range a.reqs {
		batch = append(batch[:0], first)
		var deadline <-chan time.Time
		if last >= batchWaitFrom && a.opts.BatchWait > 0 {
			// Under concurrent load, wait a little for more of it: see Options.BatchWait.
			if timer == nil {
				timer = time.NewTimer(a.opts.BatchWait)
			} else {
				timer.Reset(a.opts.BatchWait)
			}
			deadline = timer.C
		}
	fill:
		for len(batch) < a.opts.MaxBatch {
			select {
			case r, ok := <-a.reqs:
				if !ok {
					break fill
				}
				batch = append(batch, r)
				continue
			default:
			}
			if deadline == nil || len(batch) >= batchTarget {
				break
			}
			select {
			case r, ok := <-a.reqs:
				if !ok {
					break fill
				}
				batch = append(batch, r)
			case <-deadline:
				deadline = nil
			}
		}
		if deadline != nil {
			timer.Stop() // Go 1.23 timers: no stale tick survives Stop, no drain needed
		}
		last = len(batch)
		if live := claim(batch); len(live) > 0 {
			a.commit(live)
		}
		clear(batch)
	}
}

// claim keeps the requests whose callers still wait, answering those whose context ended.
func claim(batch []*appendReq) []*appendReq {
	live := batch[:0]
	for _, r := range batch {
		if !r.state.CompareAndSwap(reqPending, reqClaimed) {
			continue
		}
		if err := r.ctx.Err(); err != nil {
			r.answer(store.Appended{}, err)
			continue
		}
		live = append(live, r)
	}
	return live
}

// maxAttempts bounds how often a batch is run again after a deadlock, a serialization
// failure or a unique key taken by a concurrent transaction.
const maxAttempts = 8

// commit applies the batch and answers every request. A batch that failed as a whole is
// rolled back and, when the failure was a conflict with another transaction, run again:
// its requests see that transaction's writes the second time.
func (a *appender) commit(reqs []*appendReq) {
	ctx, cancel := context.WithTimeout(context.Background(), a.opts.AppendTimeout)
	defer cancel()
	var err error
	for attempt := 1; ; attempt++ {
		var b *appendBatch
		if b, err = a.try(ctx, reqs); err == nil {
			for i, r := range reqs {
				r.answer(b.results[i], b.errs[i])
			}
			return
		}
		if !retryable(err) || attempt == maxAttempts || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Duration(attempt) * time.Millisecond) // let the other transaction finish
	}
	err = fmt.Errorf("postgres: append batch: %w: %w", store.ErrUnavailable, err)
	for _, r := range reqs {
		r.answer(store.Appended{}, err)
	}
}

// try runs one attempt of the batch on a connection of its own.
func (a *appender) try(ctx context.Context, reqs []*appendReq) (*appendBatch, error) {
	conn, err := a.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release() // a connection left inside a transaction is destroyed, not reused
	b := newAppendBatch(reqs)
	if err := b.lockAndRead(ctx, conn.Conn()); err != nil {
		rollback(ctx, conn.Conn())
		return nil, err
	}
	b.apply()
	if err := b.write(ctx, conn.Conn()); err != nil {
		rollback(ctx, conn.Conn())
		return nil, err
	}
	return b, nil
}

// rollback ends a failed attempt's transaction; if even that fails the connection is
// closed, so that the pool drops it.
func rollback(ctx context.Context, c *pgx.Conn) {
	if _, err := c.Exec(context.WithoutCancel(ctx), `ROLLBACK`); err != nil {
		_ = c.Close(context.WithoutCancel(ctx))
	}
}

// memberKey names a member row.
type memberKey struct{ conv, user string }

// dedupKey is a message's idempotency key.
type dedupKey struct{ sender, clientMsgID string }

// convState is a locked conversation and, for write fanout, its members by standing.
type convState struct {
	c       store.Conversation // as the batch leaves it; c.Mark counts from the batch's base (markOff)
	dirty   bool
	markOff int64 // > 0: the conversation's new mark is the batch's base mark + markOff
	members []memberLite
	// mentionable holds, for read fanout, the users the batch's messages mention who are
	// members: each gets an event for the messages that mention them.
	mentionable map[string]bool
}

// memberLite is what a batch needs of a write-fanout member.
type memberLite struct {
	user    string
	ordinal int64
	hidden  bool
}

// appendBatch is one attempt at a batch: what the first round trip read, what apply
// computed from it, and the rows the second round trip writes.
type appendBatch struct {
	reqs []*appendReq

	convIDs        []string // sorted
	senderConvs    []string // with senderUsers: the senders' member rows, sorted
	senderUsers    []string
	mentionConvs   []string // with mentionUsers: the (conversation, user) pairs mentioned
	mentionUsers   []string
	dedupSenders   []string
	dedupClientIDs []string
	attachmentIDs  []string // sorted; none when no message of the batch carries one

	convs   map[string]*convState
	senders map[memberKey]*store.Member
	users   map[string]int64 // recipient -> last cursor (locked)
	known   map[dedupKey]store.Message
	// attachments holds the rows of attachmentIDs (locked) as the batch's appends before
	// left them, and attached how many of its messages carry each.
	attachments map[string]*store.Attachment
	attached    map[string]int64

	results []store.Appended
	errs    []error

	newMessages []store.Message
	marks       int64
	events      eventRows
	moved       map[memberKey]bool // sender rows whose positions apply raised
	unhide      []string           // write-fanout conversations with members to show it to again

	view store.AppendView // applyOne's, reused from append to append
	plan store.AppendPlan
}

// eventRows are the columns of the "message" events to insert.
type eventRows struct {
	users, convs     []string
	cursors, ts, seq []int64
}

func newAppendBatch(reqs []*appendReq) *appendBatch {
	b := &appendBatch{reqs: reqs, known: make(map[dedupKey]store.Message)}
	convs := make(map[string]bool)
	senders := make(map[memberKey]bool)
	mentions := make(map[memberKey]bool)
	for _, r := range reqs {
		convs[r.m.ConvID] = true
		if id := r.m.AttachmentID; id != "" && !slices.Contains(b.attachmentIDs, id) {
			b.attachmentIDs = append(b.attachmentIDs, id)
		}
		senders[memberKey{r.m.ConvID, r.m.SenderID}] = true
		b.dedupSenders = append(b.dedupSenders, r.m.SenderID)
		b.dedupClientIDs = append(b.dedupClientIDs, r.m.ClientMsgID)
		for _, u := range store.MentionedUsers(r.m) {
			if k := (memberKey{r.m.ConvID, u}); !mentions[k] {
				mentions[k] = true
				b.mentionConvs, b.mentionUsers = append(b.mentionConvs, k.conv), append(b.mentionUsers, k.user)
			}
		}
	}
	for c := range convs {
		b.convIDs = append(b.convIDs, c)
	}
	slices.Sort(b.convIDs)
	slices.Sort(b.attachmentIDs)
	keys := make([]memberKey, 0, len(senders))
	for k := range senders {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y memberKey) int { return cmp.Or(cmp.Compare(x.conv, y.conv), cmp.Compare(x.user, y.user)) })
	for _, k := range keys {
		b.senderConvs = append(b.senderConvs, k.conv)
		b.senderUsers = append(b.senderUsers, k.user)
	}
	return b
}

// The first round trip's statements. FOR UPDATE with ORDER BY locks rows in that order.
const (
	lockConvsSQL = `SELECT ` + convCols + ` FROM conversations WHERE id = ANY($1) ORDER BY id FOR UPDATE`
	// The senders' rows: a sender must be a member, and its positions move.
	lockSendersSQL = `SELECT ` + memberCols + ` FROM members
		WHERE (conv_id, user_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))
		ORDER BY conv_id, user_id FOR UPDATE`
	// The attachments the batch's messages carry: an append checks that each is complete,
	// and the collector's MarkAttachmentDeleting waits for this lock, so that it sees the
	// append's count or the append sees it deleting. Locked after the member rows and before
	// the users, the order a recall locks them in (see recallSQL).
	lockAttachmentsSQL = `SELECT ` + attachmentCols + ` FROM attachments WHERE id = ANY($1) ORDER BY id FOR UPDATE`
	// Every member of the write-fanout conversations gets an event under its user's next
	// cursor, and so does every mentioned member of a read-fanout one: the members, with
	// their users' rows locked in user order, in one statement, so that the order holds
	// for all of them. Membership and members' hidden flags cannot change meanwhile: every
	// change of them locks the conversation first. A user in several of the batch's
	// conversations comes once per conversation; locking a row twice is harmless. A
	// mentioned (conversation, user) pair that is no membership selects nothing.
	lockRecipientsSQL = `SELECT m.conv_id, m.user_id, m.ordinal, m.hidden, u.last_cursor
		FROM members m JOIN users u ON u.id = m.user_id
		WHERE m.conv_id IN (SELECT id FROM conversations WHERE id = ANY($1) AND read_from = 0)
			OR (m.conv_id, m.user_id) IN (SELECT * FROM unnest($2::text[], $3::text[]))
		ORDER BY u.id FOR UPDATE OF u`
	dedupSQL = `SELECT ` + msgCols + ` FROM messages
		WHERE (sender_id, client_msg_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))`
)

// lockAndRead is the first round trip: BEGIN, the locks and the reads, pipelined.
func (b *appendBatch) lockAndRead(ctx context.Context, c *pgx.Conn) error {
	q := &pgx.Batch{}
	q.Queue(`BEGIN ISOLATION LEVEL READ COMMITTED`)
	q.Queue(lockConvsSQL, b.convIDs)
	q.Queue(lockSendersSQL, b.senderConvs, b.senderUsers)
	if len(b.attachmentIDs) > 0 {
		q.Queue(lockAttachmentsSQL, b.attachmentIDs)
	}
	q.Queue(lockRecipientsSQL, b.convIDs, b.mentionConvs, b.mentionUsers)
	q.Queue(dedupSQL, b.dedupSenders, b.dedupClientIDs)
	br := c.SendBatch(ctx, q)
	err := b.readResults(br)
	return errors.Join(err, br.Close())
}

func (b *appendBatch) readResults(br pgx.BatchResults) error {
	if _, err := br.Exec(); err != nil {
		return err
	}
	b.convs = make(map[string]*convState, len(b.convIDs))
	if err := eachRow(br, func(r pgx.Rows) error {
		c, err := scanConversation(r)
		b.convs[c.ID] = &convState{c: c}
		return err
	}); err != nil {
		return err
	}
	b.senders = make(map[memberKey]*store.Member, len(b.senderUsers))
	if err := eachRow(br, func(r pgx.Rows) error {
		m, err := scanMember(r)
		b.senders[memberKey{m.ConvID, m.UserID}] = &m
		return err
	}); err != nil {
		return err
	}
	if len(b.attachmentIDs) > 0 {
		b.attachments = make(map[string]*store.Attachment, len(b.attachmentIDs))
		if err := eachRow(br, func(r pgx.Rows) error {
			a, err := scanAttachment(r)
			b.attachments[a.ID] = &a
			return err
		}); err != nil {
			return err
		}
	}
	b.users = make(map[string]int64)
	if err := eachRow(br, func(r pgx.Rows) error {
		var conv string
		var m memberLite
		var last int64
		if err := r.Scan(&conv, &m.user, &m.ordinal, &m.hidden, &last); err != nil {
			return err
		}
		switch cs := b.convs[conv]; {
		case cs == nil:
		case cs.c.ReadFanout(): // a mentioned member
			if cs.mentionable == nil {
				cs.mentionable = make(map[string]bool)
			}
			cs.mentionable[m.user] = true
		default:
			cs.members = append(cs.members, m)
		}
		b.users[m.user] = last
		return nil
	}); err != nil {
		return err
	}
	return eachRow(br, func(r pgx.Rows) error {
		m, err := scanMessage(r)
		b.known[dedupKey{m.SenderID, m.ClientMsgID}] = m
		return err
	})
}

// eachRow reads the next result of br row by row.
func eachRow(br pgx.BatchResults, fn func(pgx.Rows) error) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// apply computes every request's outcome in queue order with the append rule
// (store.DecideAppend), one after another, from the rows the first round trip locked.
func (b *appendBatch) apply() {
	for _, cs := range b.convs {
		slices.SortFunc(cs.members, func(x, y memberLite) int {
			return cmp.Or(cmp.Compare(x.ordinal, y.ordinal), cmp.Compare(x.user, y.user))
		})
	}
	b.results = make([]store.Appended, len(b.reqs))
	b.errs = make([]error, len(b.reqs))
	b.moved = make(map[memberKey]bool)
	for i, r := range b.reqs {
		b.results[i], b.errs[i] = b.applyOne(r.m)
	}
}

func (b *appendBatch) applyOne(m store.Message) (store.Appended, error) {
	key := dedupKey{m.SenderID, m.ClientMsgID}
	sender := b.senders[memberKey{m.ConvID, m.SenderID}]
	cs := b.convs[m.ConvID]
	if err := b.loadView(m, key, cs, sender); err != nil {
		return store.Appended{}, err
	}
	p := &b.plan
	if err := store.DecideAppend(m, &b.view, p); err != nil || p.Duplicate {
		return p.Appended, err
	}
	// The plan, applied to what the batch holds: the second round trip writes it.
	cs.c, cs.dirty = p.Conv, true
	if p.Conv.ReadFanout() {
		b.marks = p.Conv.Mark // relative to the batch: see LastMark in loadView
		cs.markOff = b.marks
	}
	if a := p.Attachment; a != nil {
		*b.attachments[a.ID] = *a
		if b.attached == nil {
			b.attached = make(map[string]int64)
		}
		b.attached[a.ID]++
	}
	b.known[key] = p.Message
	b.newMessages = append(b.newMessages, p.Message)
	for _, d := range p.Events {
		b.event(p.Message, d)
	}
	for i, after := range p.After {
		switch {
		case !p.Changed[i]:
		case after.UserID == m.SenderID:
			*sender = after
			b.moved[memberKey{m.ConvID, m.SenderID}] = true
		default: // only hidden can change in another member's row
			cs.members[i].hidden = false
			if !slices.Contains(b.unhide, cs.c.ID) {
				b.unhide = append(b.unhide, cs.c.ID)
			}
		}
	}
	return p.Appended, nil
}

// loadView fills b.view for m from the rows the first round trip read and the batch's
// appends before m changed, stopping where store.DecideAppend will.
func (b *appendBatch) loadView(m store.Message, key dedupKey, cs *convState, sender *store.Member) error {
	v := &b.view
	*v = store.AppendView{Members: v.Members[:0], Mentioned: v.Mentioned[:0], Logs: v.Logs[:0]}
	if orig, ok := b.known[key]; ok {
		v.Original = &orig
		return nil
	}
	if cs == nil || sender == nil {
		return nil
	}
	v.Conv, v.Sender = &cs.c, sender
	if m.AttachmentID != "" {
		v.Attachment = b.attachments[m.AttachmentID] // nil if there is no such row
	}
	if cs.c.ReadFanout() {
		for _, u := range store.MentionedUsers(m) {
			if cs.mentionable[u] {
				v.Mentioned = append(v.Mentioned, u)
				v.Logs = append(v.Logs, b.users[u])
			}
		}
		// Marks are handed out at commit (writeConversations): the batch counts its own
		// from 0, and each conversation's new mark is the base plus its offset.
		v.LastMark = b.marks
		return nil
	}
	for _, mem := range cs.members {
		last, ok := b.users[mem.user]
		if !ok {
			return fmt.Errorf("append message event for %s: %w", mem.user, store.ErrNotFound)
		}
		row := store.Member{ConvID: m.ConvID, UserID: mem.user, Ordinal: mem.ordinal, Hidden: mem.hidden}
		if mem.user == sender.UserID {
			row = *sender
		}
		v.Members = append(v.Members, row)
		v.Logs = append(v.Logs, last)
	}
	return nil
}

// event adds m's "message" event to d's user's log, under the cursor the rule gave it.
func (b *appendBatch) event(m store.Message, d store.Delivery) {
	b.users[d.UserID] = d.Cursor
	b.events.users = append(b.events.users, d.UserID)
	b.events.convs = append(b.events.convs, m.ConvID)
	b.events.cursors = append(b.events.cursors, d.Cursor)
	b.events.ts = append(b.events.ts, m.CreatedAt)
	b.events.seq = append(b.events.seq, m.Seq)
}

// write is the second round trip: every row the batch changes, in one statement of
// data-modifying CTEs (one per table written: a batch of any size costs the database the
// same few statements), then COMMIT, pipelined.
func (b *appendBatch) write(ctx context.Context, c *pgx.Conn) error {
	var w cteWriter
	if len(b.newMessages) > 0 {
		b.writeMessages(&w)
		b.writeConversations(&w)
		b.writeCursors(&w)
		b.writeAttachments(&w)
	}
	b.writeSenders(&w)
	q := &pgx.Batch{}
	if sql, args := w.statement(); sql != "" {
		q.Queue(sql, args...)
	}
	if len(b.unhide) > 0 { // rare, and apart: it may touch a sender's row written above
		q.Queue(`UPDATE members SET hidden = false WHERE conv_id = ANY($1) AND hidden`, b.unhide)
	}
	q.Queue(`COMMIT`)
	return c.SendBatch(ctx, q).Close()
}

// cteWriter builds one statement out of several data-modifying ones, each a CTE.
type cteWriter struct {
	ctes []string
	args []any
}

var paramRE = regexp.MustCompile(`\$(\d+)`)

// add appends a CTE named name whose parameters are written $1..$n in sql, renumbered
// after those of the CTEs before it.
func (w *cteWriter) add(name, sql string, args ...any) {
	base := len(w.args)
	sql = paramRE.ReplaceAllStringFunc(sql, func(p string) string {
		n, _ := strconv.Atoi(p[1:])
		return "$" + strconv.Itoa(n+base)
	})
	w.ctes = append(w.ctes, name+" AS ("+sql+")")
	w.args = append(w.args, args...)
}

// statement returns the whole statement, or "" when nothing was added.
func (w *cteWriter) statement() (string, []any) {
	if len(w.ctes) == 0 {
		return "", nil
	}
	return "WITH " + strings.Join(w.ctes, ",\n") + "\nSELECT 1", w.args
}

func (b *appendBatch) writeMessages(w *cteWriter) {
	n := len(b.newMessages)
	var (
		convs, msgIDs, clientIDs, senders = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		seqs, created                     = make([]int64, n), make([]int64, n)
		types                             = make([]int32, n)
		contents, extras                  = make([][]byte, n), make([][]byte, n)
		mentions, attachments             = make([]*string, n), make([]*string, n)
	)
	for i, m := range b.newMessages {
		convs[i], seqs[i], msgIDs[i], clientIDs[i], senders[i] = m.ConvID, m.Seq, m.MsgID, m.ClientMsgID, m.SenderID
		types[i], contents[i], extras[i], created[i] = int32(m.ContentType), m.Content, m.Extra, m.CreatedAt
		mentions[i], attachments[i] = sqlrow.MentionsValue(m.Mentions), attachmentValue(m.AttachmentID)
	}
	w.add("msgs", `INSERT INTO messages (`+msgCols+`)
		SELECT c, s, mi, ci, se, ty, co, ex, cr, false, mn, at
		FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::int[],
			$7::bytea[], $8::bytea[], $9::bigint[], $10::text[], $11::text[]) AS v(c, s, mi, ci, se, ty, co, ex, cr, mn, at)`,
		convs, seqs, msgIDs, clientIDs, senders, types, contents, extras, created, mentions, attachments)
}

// writeConversations raises max_seq and updated_at, and gives read-fanout conversations
// their marks. The mark row is the last lock the batch takes: held from here to COMMIT, it
// makes marks commit in the order they are handed out (see schemaV1).
func (b *appendBatch) writeConversations(w *cteWriter) {
	var ids []string
	var maxSeqs, updated, markOffs []int64
	for _, id := range b.convIDs {
		cs := b.convs[id]
		if cs == nil || !cs.dirty {
			continue
		}
		ids = append(ids, id)
		maxSeqs = append(maxSeqs, cs.c.MaxSeq)
		updated = append(updated, cs.c.UpdatedAt)
		markOffs = append(markOffs, cs.markOff)
	}
	const set = `UPDATE conversations c SET max_seq = v.max_seq, updated_at = v.updated_at`
	const from = ` FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[]) AS v(id, max_seq, updated_at, mark_off)`
	if b.marks == 0 {
		w.add("convs", set+from+` WHERE c.id = v.id`, ids, maxSeqs, updated, markOffs)
		return
	}
	w.add("marks", `UPDATE store_state SET mark = mark + $1 RETURNING mark`, b.marks)
	w.add("convs", set+`, mark = CASE WHEN v.mark_off > 0 THEN marks.mark - $5 + v.mark_off ELSE c.mark END`+
		from+`, marks WHERE c.id = v.id`, ids, maxSeqs, updated, markOffs, b.marks)
}

// writeCursors raises the recipients' last cursors and inserts their events.
func (b *appendBatch) writeCursors(w *cteWriter) {
	if len(b.events.users) == 0 {
		return
	}
	ids := make([]string, 0, len(b.users))
	lasts := make([]int64, 0, len(b.users))
	for id, last := range b.users {
		ids = append(ids, id)
		lasts = append(lasts, last)
	}
	w.add("cursors", `UPDATE users u SET last_cursor = v.last FROM unnest($1::text[], $2::bigint[]) AS v(id, last)
		WHERE u.id = v.id AND u.last_cursor < v.last`, ids, lasts)
	e := b.events
	w.add("events", `INSERT INTO events (user_id, cursor, type, conv_id, ts, seq)
		SELECT u, c, $6, cv, t, s FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bigint[], $5::bigint[])
		AS v(u, c, cv, t, s)`, e.users, e.cursors, e.convs, e.ts, e.seq, store.EventMessage)
}

// writeAttachments counts the batch's messages in their attachments' rows: an increment
// (store.AppendPlan.Attachment), on the rows the first round trip locked.
func (b *appendBatch) writeAttachments(w *cteWriter) {
	if len(b.attached) == 0 {
		return
	}
	ids := make([]string, 0, len(b.attached))
	counts := make([]int64, 0, len(b.attached))
	for id, n := range b.attached {
		ids, counts = append(ids, id), append(counts, n)
	}
	w.add("attachments", `UPDATE attachments a SET refs = a.refs + v.n, idle_since = 0
		FROM unnest($1::text[], $2::bigint[]) AS v(id, n) WHERE a.id = v.id`, ids, counts)
}

// writeSenders raises the senders' positions (GREATEST: never back) and shows them the
// conversation again if they had hidden it.
func (b *appendBatch) writeSenders(w *cteWriter) {
	if len(b.moved) == 0 {
		return
	}
	var convs, users []string
	var reads, delivs []int64
	for k := range b.moved {
		m := b.senders[k]
		convs, users = append(convs, k.conv), append(users, k.user)
		reads, delivs = append(reads, m.ReadSeq), append(delivs, m.DeliveredSeq)
	}
	w.add("senders", `UPDATE members m SET read_seq = GREATEST(m.read_seq, v.r),
		delivered_seq = GREATEST(m.delivered_seq, v.d), hidden = false
		FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) AS v(c, u, r, d)
		WHERE m.conv_id = v.c AND m.user_id = v.u`, convs, users, reads, delivs)
}

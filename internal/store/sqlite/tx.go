package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/sqlrow"
)

// runner executes prepared statements inside one transaction. The read side runs them on
// a pooled *sql.Tx; the write side on the writer's single connection (see scope).
type runner interface {
	exec(ctx context.Context, id stmtID, args ...any) (sql.Result, error)
	query(ctx context.Context, id stmtID, args ...any) (*sql.Rows, error)
	queryRow(ctx context.Context, id stmtID, args ...any) rowScanner
	// fail translates err (see translate) with a description built from format and args,
	// and lets the runner react to it: the writer stops its batch on ErrUnavailable.
	fail(err error, format string, args ...any) error
}

// readTx implements store.ReadTx on a runner.
type readTx struct{ q runner }

// writeTx implements store.Tx on a runner.
type writeTx struct{ readTx }

var (
	_ store.ReadTx = readTx{}
	_ store.Tx     = writeTx{}
)

// rowScanner is what *sql.Row and *sql.Rows have in common.
type rowScanner = sqlrow.Row

// User implements store.UserReader.
func (t readTx) User(ctx context.Context, id string) (store.User, error) {
	var u store.User
	err := t.q.queryRow(ctx, stUser, id).Scan(&u.ID, &u.Name, &u.TokenGen, &u.CreatedAt, &u.PresenceHidden)
	if err != nil {
		return store.User{}, t.q.fail(err, "user %q", id)
	}
	return u, nil
}

// CreateUser implements store.UserWriter.
func (t writeTx) CreateUser(ctx context.Context, u store.User) error {
	if _, err := t.q.exec(ctx, stCreateUser, u.ID, u.Name, u.TokenGen, u.CreatedAt, u.PresenceHidden); err != nil {
		return t.q.fail(err, "create user %q", u.ID)
	}
	return nil
}

// SetTokenGen implements store.UserWriter.
func (t writeTx) SetTokenGen(ctx context.Context, id string, gen int64) error {
	res, err := t.q.exec(ctx, stSetTokenGen, gen, id)
	return t.expectOne(res, err, "set token generation of user %q", id)
}

// SetPresenceHidden implements store.UserWriter.
func (t writeTx) SetPresenceHidden(ctx context.Context, id string, hidden bool) error {
	res, err := t.q.exec(ctx, stSetPresenceHidden, hidden, id)
	return t.expectOne(res, err, "set presence of user %q", id)
}

// Conversation implements store.ConversationReader.
func (t readTx) Conversation(ctx context.Context, id string) (store.Conversation, error) {
	c, err := scanConversation(t.q.queryRow(ctx, stConversation, id))
	if err != nil {
		return store.Conversation{}, t.q.fail(err, "conversation %q", id)
	}
	return c, nil
}

// CreateConversation implements store.ConversationWriter.
func (t writeTx) CreateConversation(ctx context.Context, c store.Conversation) error {
	_, err := t.q.exec(ctx, stCreateConversation, c.ID, c.Type, c.Name, c.OwnerID, c.ReadDetail,
		c.MaxSeq, c.MembersCount, c.CreatedAt, c.UpdatedAt, c.ReadFrom, c.Mark, c.RetentionMS)
	if err != nil {
		return t.q.fail(err, "create conversation %q", c.ID)
	}
	return nil
}

// UpdateConversation implements store.ConversationWriter.
func (t writeTx) UpdateConversation(ctx context.Context, c store.Conversation) error {
	res, err := t.q.exec(ctx, stUpdateConversation, c.Type, c.Name, c.OwnerID, c.ReadDetail,
		c.MaxSeq, c.MembersCount, c.CreatedAt, c.UpdatedAt, c.ReadFrom, c.Mark, c.RetentionMS, c.ID)
	return t.expectOne(res, err, "update conversation %q", c.ID)
}

// Member implements store.MemberReader.
func (t readTx) Member(ctx context.Context, convID, userID string) (store.Member, error) {
	m, err := scanMember(t.q.queryRow(ctx, stMember, convID, userID))
	if err != nil {
		return store.Member{}, t.q.fail(err, "member %q of conversation %q", userID, convID)
	}
	return m, nil
}

// Members implements store.MemberReader.
func (t readTx) Members(ctx context.Context, convID string) ([]store.Member, error) {
	rows, err := t.q.query(ctx, stMembers, convID)
	if err != nil {
		return nil, t.q.fail(err, "members of conversation %q", convID)
	}
	ms, err := collect(rows, scanMember)
	if err != nil {
		return nil, t.q.fail(err, "members of conversation %q", convID)
	}
	// Sorted here rather than by ORDER BY, which would make SQLite build a temporary
	// b-tree on every send.
	slices.SortFunc(ms, func(a, b store.Member) int {
		return cmp.Or(cmp.Compare(a.Ordinal, b.Ordinal), cmp.Compare(a.UserID, b.UserID))
	})
	return ms, nil
}

// MembersAfter implements store.MemberReader, by the index members_by_ordinal.
func (t readTx) MembersAfter(ctx context.Context, convID string, after int64, limit int) ([]store.Member, error) {
	rows, err := t.q.query(ctx, stMembersAfter, convID, after, limit)
	if err != nil {
		return nil, t.q.fail(err, "members of conversation %q", convID)
	}
	ms, err := collect(rows, scanMember)
	if err != nil {
		return nil, t.q.fail(err, "members of conversation %q", convID)
	}
	return ms, nil
}

// LastOrdinal implements store.MemberReader, by the index members_by_ordinal.
func (t readTx) LastOrdinal(ctx context.Context, convID string) (int64, error) {
	var last int64
	if err := t.q.queryRow(ctx, stLastOrdinal, convID).Scan(&last); err != nil {
		return 0, t.q.fail(err, "last ordinal of conversation %q", convID)
	}
	return last, nil
}

// Memberships implements store.MemberReader.
func (t readTx) Memberships(ctx context.Context, userID string) ([]store.Membership, error) {
	rows, err := t.q.query(ctx, stMemberships, userID)
	if err != nil {
		return nil, t.q.fail(err, "memberships of user %q", userID)
	}
	ms, err := collect(rows, scanMembership)
	if err != nil {
		return nil, t.q.fail(err, "memberships of user %q", userID)
	}
	return ms, nil
}

// ReadFanoutChanges implements store.MarkReader.
func (t readTx) ReadFanoutChanges(ctx context.Context, userID string, after int64) ([]store.Membership, int64, error) {
	rows, err := t.q.query(ctx, stReadFanoutChanges, userID, after)
	if err != nil {
		return nil, 0, t.q.fail(err, "read-fanout changes of user %q", userID)
	}
	ms, err := collect(rows, scanMembership)
	if err != nil {
		return nil, 0, t.q.fail(err, "read-fanout changes of user %q", userID)
	}
	mark, err := t.lastMark(ctx, 0)
	return ms, mark, err
}

// lastMark returns the store's latest mark plus add: the highest mark of any conversation
// (one seek at the end of conversations_by_mark).
func (t readTx) lastMark(ctx context.Context, add int64) (int64, error) {
	var mark int64
	if err := t.q.queryRow(ctx, stLastMark).Scan(&mark); err != nil {
		return 0, t.q.fail(err, "the latest mark")
	}
	return mark + add, nil
}

// PutMember implements store.MemberWriter.
func (t writeTx) PutMember(ctx context.Context, m store.Member) error {
	_, err := t.q.exec(ctx, stPutMember, m.ConvID, m.UserID, m.JoinedAt, m.Ordinal, m.JoinSeq,
		m.ClearedSeq, m.ReadSeq, m.DeliveredSeq, m.Hidden)
	if err != nil {
		return t.q.fail(err, "put member %q of conversation %q", m.UserID, m.ConvID)
	}
	return nil
}

// AdvancePositions implements store.MemberWriter: one UPDATE that raises the positions
// only where they move; no row back means the member did not move or is no member.
func (t writeTx) AdvancePositions(ctx context.Context, convID, userID string, readSeq, deliveredSeq int64) (store.Member, bool, error) {
	m, err := scanMember(t.q.queryRow(ctx, stAdvancePositions, readSeq, deliveredSeq, convID, userID))
	if err == nil {
		return m, true, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return store.Member{}, false, t.q.fail(err, "advance member %q of conversation %q", userID, convID)
	}
	m, err = t.Member(ctx, convID, userID)
	return m, false, err
}

// DeleteMember implements store.MemberWriter.
func (t writeTx) DeleteMember(ctx context.Context, convID, userID string) error {
	res, err := t.q.exec(ctx, stDeleteMember, convID, userID)
	return t.expectOne(res, err, "delete member %q of conversation %q", userID, convID)
}

// Message implements store.MessageReader.
func (t readTx) Message(ctx context.Context, convID string, seq int64) (store.Message, error) {
	m, err := scanMessage(t.q.queryRow(ctx, stMessage, convID, seq))
	if err != nil {
		return store.Message{}, t.q.fail(err, "message %q/%d", convID, seq)
	}
	return m, nil
}

// MessageByClientID implements store.MessageReader.
func (t readTx) MessageByClientID(ctx context.Context, senderID, clientMsgID string) (store.Message, error) {
	m, err := scanMessage(t.q.queryRow(ctx, stMessageByClientID, senderID, clientMsgID))
	if err != nil {
		return store.Message{}, t.q.fail(err, "message %q of sender %q", clientMsgID, senderID)
	}
	return m, nil
}

// Messages implements store.MessageReader. A Limit of zero or less selects nothing.
func (t readTx) Messages(ctx context.Context, convID string, r store.MessageRange) ([]store.Message, error) {
	limit := max(r.Limit, 0)
	var rows *sql.Rows
	var err error
	if r.BeforeSeq > 0 {
		rows, err = t.q.query(ctx, stMessagesBefore, convID, r.Floor, r.BeforeSeq, limit)
	} else {
		rows, err = t.q.query(ctx, stMessagesAfter, convID, max(r.AfterSeq, r.Floor), limit)
	}
	if err != nil {
		return nil, t.q.fail(err, "messages of conversation %q", convID)
	}
	ms, err := collect(rows, scanMessage)
	if err != nil {
		return nil, t.q.fail(err, "messages of conversation %q", convID)
	}
	if r.BeforeSeq > 0 {
		slices.Reverse(ms) // selected newest first so that LIMIT keeps the latest
	}
	return ms, nil
}

// InsertMessage implements store.MessageWriter.
func (t writeTx) InsertMessage(ctx context.Context, m store.Message) error {
	_, err := t.q.exec(ctx, stInsertMessage, messageArgs(m)...)
	if err != nil {
		return t.q.fail(err, "insert message %q/%d", m.ConvID, m.Seq)
	}
	return nil
}

// RecallMessage implements store.MessageWriter: first the attachment's count, while the
// message still reads unrecalled (a no-op when it carries none or is recalled already),
// then the message. The single writer makes the two one step.
func (t writeTx) RecallMessage(ctx context.Context, convID string, seq, at int64) error {
	if _, err := t.q.exec(ctx, stDropAttachmentRef, at, convID, seq); err != nil {
		return t.q.fail(err, "uncount the attachment of message %q/%d", convID, seq)
	}
	res, err := t.q.exec(ctx, stRecallMessage, convID, seq)
	return t.expectOne(res, err, "recall message %q/%d", convID, seq)
}

// Cursors implements store.EventReader.
func (t readTx) Cursors(ctx context.Context, userID string) (store.CursorBounds, error) {
	var b store.CursorBounds
	if err := t.q.queryRow(ctx, stCursors, userID).Scan(&b.Last, &b.Pruned); err != nil {
		return store.CursorBounds{}, t.q.fail(err, "cursors of user %q", userID)
	}
	return b, nil
}

// AppendEvent implements store.EventWriter. The cursor is the user's highest one plus one,
// computed in the statement that inserts the event and serialized by the single writer, so
// cursors are gapless per user whatever the batch holds.
func (t writeTx) AppendEvent(ctx context.Context, e store.Event) (int64, error) {
	var cursor int64
	err := t.q.queryRow(ctx, stAppendEvent, e.Type, e.ConvID, e.TS, e.Seq, blob(e.Data), e.UserID).Scan(&cursor)
	if err != nil {
		return 0, t.q.fail(err, "append event: user %q", e.UserID)
	}
	return cursor, nil
}

// pruneEvents is store.Store.PruneEvents inside an Update. After removing the oldest events it also
// removes any event of an affected user at or below the new Pruned bound that a clock step
// backwards left with a later ts, so that "every cursor <= Pruned is gone" holds; such
// stragglers count in the result and may take it past limit.
func (t writeTx) pruneEvents(ctx context.Context, before int64, limit int) (int, error) {
	highest, removed, err := t.pruneOldest(ctx, before, max(limit, 0))
	if err != nil {
		return 0, err
	}
	users := make([]string, 0, len(highest))
	for u := range highest {
		users = append(users, u)
	}
	slices.Sort(users) // a fixed order keeps lock and log order deterministic
	for _, u := range users {
		n, err := t.raisePruned(ctx, u, highest[u])
		if err != nil {
			return 0, err
		}
		removed += n
	}
	return removed, nil
}

// pruneOldest deletes up to limit events with ts < before, oldest first, and returns the
// highest cursor removed per user and how many it removed.
func (t writeTx) pruneOldest(ctx context.Context, before int64, limit int) (map[string]int64, int, error) {
	rows, err := t.q.query(ctx, stPruneOldest, before, limit)
	if err != nil {
		return nil, 0, t.q.fail(err, "prune events")
	}
	defer rows.Close()
	highest := make(map[string]int64)
	removed := 0
	for rows.Next() {
		var user string
		var cursor int64
		if err := rows.Scan(&user, &cursor); err != nil {
			return nil, 0, t.q.fail(err, "prune events")
		}
		highest[user] = max(highest[user], cursor)
		removed++
	}
	if err := rows.Err(); err != nil {
		return nil, 0, t.q.fail(err, "prune events")
	}
	return highest, removed, nil
}

// raisePruned removes the user's events up to cursor and raises its Pruned bound to it.
func (t writeTx) raisePruned(ctx context.Context, user string, cursor int64) (int, error) {
	res, err := t.q.exec(ctx, stPruneUpTo, user, cursor)
	if err != nil {
		return 0, t.q.fail(err, "prune events of user %q", user)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, t.q.fail(err, "prune events of user %q", user)
	}
	if _, err := t.q.exec(ctx, stRaisePruned, cursor, user); err != nil {
		return 0, t.q.fail(err, "raise pruned cursor of user %q", user)
	}
	return int(n), nil
}

// expectOne turns an UPDATE or DELETE that matched no row into ErrNotFound.
func (t writeTx) expectOne(res sql.Result, err error, format string, args ...any) error {
	if err != nil {
		return t.q.fail(err, format, args...)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return t.q.fail(err, format, args...)
	}
	if n == 0 {
		return fmt.Errorf("sqlite: %s: %w", fmt.Sprintf(format, args...), store.ErrNotFound)
	}
	return nil
}

// messageArgs are the values of msgCols for m, as messages and overlays store them.
func messageArgs(m store.Message) []any {
	return []any{m.ConvID, m.Seq, m.MsgID, m.ClientMsgID, m.SenderID, m.ContentType, blob(m.Content),
		blob(m.Extra), m.CreatedAt, m.Recalled, sqlrow.MentionsValue(m.Mentions), nullString(m.AttachmentID)}
}

// nullString stores an empty string as NULL: an absent attachment id, which the partial
// index messages_by_attachment then leaves out.
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// blob stores a nil slice as NULL, so that "absent" survives a round trip.
func blob(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}

// collect scans every row with scan and closes rows.
func collect[T any](rows *sql.Rows, scan func(rowScanner) (T, error)) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// The rows, read by the column lists above.
var (
	scanConversation = sqlrow.Conversation
	scanMember       = sqlrow.Member
	scanMembership   = sqlrow.Membership
)

// scanMessage reads msgCols: sqlrow.Message's columns, then attachment_id, which the
// shared reader does not know yet. Its destinations are listed here rather than the shared
// reader wrapped, so that a message read (one per send, for the duplicate check) allocates
// nothing more than before.
func scanMessage(r rowScanner) (store.Message, error) {
	var m store.Message
	err := r.Scan(&m.ConvID, &m.Seq, &m.MsgID, &m.ClientMsgID, &m.SenderID, &m.ContentType,
		&m.Content, &m.Extra, &m.CreatedAt, &m.Recalled, sqlrow.MentionsDest(&m.Mentions),
		emptyIfNull{&m.AttachmentID})
	return m, err
}

// emptyIfNull is a scan destination that reads a nullable text column into *s: "" for NULL.
// A single pointer, it fits an interface without an allocation.
type emptyIfNull struct{ s *string }

func (d emptyIfNull) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*d.s = ""
	case string:
		*d.s = v
	case []byte:
		*d.s = string(v)
	default:
		return fmt.Errorf("sqlite: text column holds a %T", src)
	}
	return nil
}

// MessageAt bisects the hot messages by time (store.SearchMessageAt).
func (t readTx) MessageAt(ctx context.Context, convID string, ts int64) (int64, error) {
	return store.SearchMessageAt(ctx, t, convID, ts)
}

package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/sqlrow"
	"github.com/parleychat/parley/protocol"
)

// Column lists shared by several statements, in the order the scan helpers read them.
const (
	userCols   = `id, name, token_gen, created_at, presence_hidden`
	convCols   = `id, type, name, owner_id, read_detail, max_seq, members_count, created_at, updated_at, read_from, mark, retention_ms`
	memberCols = `conv_id, user_id, joined_at, ordinal, join_seq, cleared_seq, read_seq, delivered_seq, hidden`
	msgCols    = `conv_id, seq, msg_id, client_msg_id, sender_id, content_type, content, extra, created_at, recalled, mentions, attachment_id`
)

// readTx implements store.ReadTx on one PostgreSQL transaction.
type readTx struct {
	tx pgx.Tx
	// lock is appended to the point reads of users, conversations and members: " FOR
	// UPDATE" in an Update. Several nodes run Updates at once at READ COMMITTED, and an fn
	// reads a row to write it back (UpdateConversation overwrites every field): the row
	// lock makes that read-modify-write atomic, as the contract's serializable Updates
	// promise, where a plain read would let two writers each overwrite the other's change.
	lock string
}

// writeTx implements store.Tx.
type writeTx struct{ readTx }

var (
	_ store.ReadTx = readTx{}
	_ store.Tx     = writeTx{}
)

// User implements store.UserReader.
func (t readTx) User(ctx context.Context, id string) (store.User, error) {
	var u store.User
	err := t.tx.QueryRow(ctx, `SELECT `+userCols+` FROM users WHERE id = $1`+t.lock, id).
		Scan(&u.ID, &u.Name, &u.TokenGen, &u.CreatedAt, &u.PresenceHidden)
	if err != nil {
		return store.User{}, translate(err, fmt.Sprintf("user %q", id))
	}
	return u, nil
}

// CreateUser implements store.UserWriter. ON CONFLICT DO NOTHING rather than a unique
// violation, which would abort the transaction: the contract lets fn go on after ErrExists.
func (t writeTx) CreateUser(ctx context.Context, u store.User) error {
	tag, err := t.tx.Exec(ctx, `INSERT INTO users (`+userCols+`) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`,
		u.ID, u.Name, u.TokenGen, u.CreatedAt, u.PresenceHidden)
	return expectOne(tag, err, store.ErrExists, "create user %q", u.ID)
}

// SetTokenGen implements store.UserWriter.
func (t writeTx) SetTokenGen(ctx context.Context, id string, gen int64) error {
	tag, err := t.tx.Exec(ctx, `UPDATE users SET token_gen = $1 WHERE id = $2`, gen, id)
	return expectOne(tag, err, store.ErrNotFound, "set token generation of user %q", id)
}

// SetPresenceHidden implements store.UserWriter.
func (t writeTx) SetPresenceHidden(ctx context.Context, id string, hidden bool) error {
	tag, err := t.tx.Exec(ctx, `UPDATE users SET presence_hidden = $1 WHERE id = $2`, hidden, id)
	return expectOne(tag, err, store.ErrNotFound, "set presence of user %q", id)
}

// Conversation implements store.ConversationReader.
func (t readTx) Conversation(ctx context.Context, id string) (store.Conversation, error) {
	c, err := scanConversation(t.tx.QueryRow(ctx, `SELECT `+convCols+` FROM conversations WHERE id = $1`+t.lock, id))
	if err != nil {
		return store.Conversation{}, translate(err, fmt.Sprintf("conversation %q", id))
	}
	return c, nil
}

// CreateConversation implements store.ConversationWriter.
func (t writeTx) CreateConversation(ctx context.Context, c store.Conversation) error {
	tag, err := t.tx.Exec(ctx, `INSERT INTO conversations (`+convCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT DO NOTHING`,
		c.ID, c.Type, c.Name, c.OwnerID, c.ReadDetail, c.MaxSeq, c.MembersCount, c.CreatedAt,
		c.UpdatedAt, c.ReadFrom, c.Mark, c.RetentionMS)
	return expectOne(tag, err, store.ErrExists, "create conversation %q", c.ID)
}

// UpdateConversation implements store.ConversationWriter.
func (t writeTx) UpdateConversation(ctx context.Context, c store.Conversation) error {
	tag, err := t.tx.Exec(ctx, `UPDATE conversations SET type = $1, name = $2, owner_id = $3,
		read_detail = $4, max_seq = $5, members_count = $6, created_at = $7, updated_at = $8,
		read_from = $9, mark = $10, retention_ms = $11 WHERE id = $12`,
		c.Type, c.Name, c.OwnerID, c.ReadDetail, c.MaxSeq, c.MembersCount, c.CreatedAt,
		c.UpdatedAt, c.ReadFrom, c.Mark, c.RetentionMS, c.ID)
	return expectOne(tag, err, store.ErrNotFound, "update conversation %q", c.ID)
}

// Member implements store.MemberReader.
func (t readTx) Member(ctx context.Context, convID, userID string) (store.Member, error) {
	m, err := scanMember(t.tx.QueryRow(ctx, `SELECT `+memberCols+` FROM members
		WHERE conv_id = $1 AND user_id = $2`+t.lock, convID, userID))
	if err != nil {
		return store.Member{}, translate(err, fmt.Sprintf("member %q of conversation %q", userID, convID))
	}
	return m, nil
}

// Members implements store.MemberReader.
func (t readTx) Members(ctx context.Context, convID string) ([]store.Member, error) {
	return collect(ctx, t.tx, scanMember, fmt.Sprintf("members of conversation %q", convID),
		`SELECT `+memberCols+` FROM members WHERE conv_id = $1 ORDER BY ordinal, user_id`, convID)
}

// MembersAfter implements store.MemberReader, by the index members_by_ordinal.
func (t readTx) MembersAfter(ctx context.Context, convID string, after int64, limit int) ([]store.Member, error) {
	return collect(ctx, t.tx, scanMember, fmt.Sprintf("members of conversation %q", convID),
		`SELECT `+memberCols+` FROM members WHERE conv_id = $1 AND ordinal > $2
		ORDER BY ordinal, user_id LIMIT $3`, convID, after, max(limit, 0))
}

// LastOrdinal implements store.MemberReader, by the index members_by_ordinal.
func (t readTx) LastOrdinal(ctx context.Context, convID string) (int64, error) {
	var last int64
	err := t.tx.QueryRow(ctx, `SELECT coalesce(max(ordinal), 0) FROM members WHERE conv_id = $1`, convID).Scan(&last)
	if err != nil {
		return 0, translate(err, fmt.Sprintf("last ordinal of conversation %q", convID))
	}
	return last, nil
}

const membershipsSQL = `SELECT m.conv_id, m.user_id, m.joined_at, m.ordinal, m.join_seq,
	m.cleared_seq, m.read_seq, m.delivered_seq, m.hidden,
	c.id, c.type, c.name, c.owner_id, c.read_detail, c.max_seq, c.members_count,
	c.created_at, c.updated_at, c.read_from, c.mark, c.retention_ms
	FROM members m JOIN conversations c ON c.id = m.conv_id
	WHERE m.user_id = $1`

// Memberships implements store.MemberReader.
func (t readTx) Memberships(ctx context.Context, userID string) ([]store.Membership, error) {
	return collect(ctx, t.tx, scanMembership, fmt.Sprintf("memberships of user %q", userID), membershipsSQL, userID)
}

// ReadFanoutChanges implements store.MarkReader. The latest mark is store_state's: it is
// raised in the commit that gives a conversation its mark, under the row's lock, so a
// snapshot never holds a mark without every lower one (see schemaV1).
func (t readTx) ReadFanoutChanges(ctx context.Context, userID string, after int64) ([]store.Membership, int64, error) {
	what := fmt.Sprintf("read-fanout changes of user %q", userID)
	ms, err := collect(ctx, t.tx, scanMembership, what, membershipsSQL+` AND c.read_from > 0 AND c.mark > $2`, userID, after)
	if err != nil {
		return nil, 0, err
	}
	var mark int64
	if err := t.tx.QueryRow(ctx, `SELECT mark FROM store_state`).Scan(&mark); err != nil {
		return nil, 0, translate(err, what)
	}
	return ms, mark, nil
}

// PutMember implements store.MemberWriter.
func (t writeTx) PutMember(ctx context.Context, m store.Member) error {
	_, err := t.tx.Exec(ctx, `INSERT INTO members (`+memberCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (conv_id, user_id) DO UPDATE SET joined_at = excluded.joined_at,
		ordinal = excluded.ordinal, join_seq = excluded.join_seq,
		cleared_seq = excluded.cleared_seq, read_seq = excluded.read_seq,
		delivered_seq = excluded.delivered_seq, hidden = excluded.hidden`,
		m.ConvID, m.UserID, m.JoinedAt, m.Ordinal, m.JoinSeq, m.ClearedSeq, m.ReadSeq, m.DeliveredSeq, m.Hidden)
	if err != nil {
		return translate(err, fmt.Sprintf("put member %q of conversation %q", m.UserID, m.ConvID))
	}
	return nil
}

// AdvancePositions implements store.MemberWriter: one UPDATE that raises the positions
// only where they move (GREATEST, so no writer moves one back whatever it read); no row
// back means the member did not move or is no member.
func (t writeTx) AdvancePositions(ctx context.Context, convID, userID string, readSeq, deliveredSeq int64) (store.Member, bool, error) {
	m, err := scanMember(t.tx.QueryRow(ctx, `UPDATE members
		SET read_seq = GREATEST(read_seq, $1), delivered_seq = GREATEST(delivered_seq, $2)
		WHERE conv_id = $3 AND user_id = $4 AND (read_seq < $1 OR delivered_seq < $2)
		RETURNING `+memberCols, readSeq, deliveredSeq, convID, userID))
	if err == nil {
		return m, true, nil
	}
	if err != pgx.ErrNoRows {
		return store.Member{}, false, translate(err, fmt.Sprintf("advance member %q of conversation %q", userID, convID))
	}
	m, err = t.Member(ctx, convID, userID)
	return m, false, err
}

// DeleteMember implements store.MemberWriter.
func (t writeTx) DeleteMember(ctx context.Context, convID, userID string) error {
	tag, err := t.tx.Exec(ctx, `DELETE FROM members WHERE conv_id = $1 AND user_id = $2`, convID, userID)
	return expectOne(tag, err, store.ErrNotFound, "delete member %q of conversation %q", userID, convID)
}

// Message implements store.MessageReader.
func (t readTx) Message(ctx context.Context, convID string, seq int64) (store.Message, error) {
	m, err := scanMessage(t.tx.QueryRow(ctx, `SELECT `+msgCols+` FROM messages WHERE conv_id = $1 AND seq = $2`, convID, seq))
	if err != nil {
		return store.Message{}, translate(err, fmt.Sprintf("message %q/%d", convID, seq))
	}
	return m, nil
}

// MessageByClientID implements store.MessageReader.
func (t readTx) MessageByClientID(ctx context.Context, senderID, clientMsgID string) (store.Message, error) {
	m, err := scanMessage(t.tx.QueryRow(ctx, `SELECT `+msgCols+` FROM messages
		WHERE sender_id = $1 AND client_msg_id = $2`, senderID, clientMsgID))
	if err != nil {
		return store.Message{}, translate(err, fmt.Sprintf("message %q of sender %q", clientMsgID, senderID))
	}
	return m, nil
}

// Messages implements store.MessageReader. A Limit of zero or less selects nothing.
func (t readTx) Messages(ctx context.Context, convID string, r store.MessageRange) ([]store.Message, error) {
	what := fmt.Sprintf("messages of conversation %q", convID)
	limit := max(r.Limit, 0)
	if r.BeforeSeq > 0 {
		// Selected newest first so that LIMIT keeps the latest, then put back in order.
		return collect(ctx, t.tx, scanMessage, what, `SELECT * FROM (
			SELECT `+msgCols+` FROM messages WHERE conv_id = $1 AND seq > $2 AND seq < $3
			ORDER BY seq DESC LIMIT $4) newest ORDER BY seq`, convID, r.Floor, r.BeforeSeq, limit)
	}
	return collect(ctx, t.tx, scanMessage, what, `SELECT `+msgCols+` FROM messages
		WHERE conv_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, convID, max(r.AfterSeq, r.Floor), limit)
}

// InsertMessage implements store.MessageWriter.
func (t writeTx) InsertMessage(ctx context.Context, m store.Message) error {
	tag, err := t.tx.Exec(ctx, `INSERT INTO messages (`+msgCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT DO NOTHING`, messageArgs(m)...)
	return expectOne(tag, err, store.ErrExists, "insert message %q/%d", m.ConvID, m.Seq)
}

// recallSQL recalls a message not yet recalled and uncounts it from its attachment, if it
// carries one, in one statement. At READ COMMITTED a recall that waited for a concurrent
// one of the same message checks NOT recalled again on the row that one committed, so
// only the first recall uncounts. The attachment's row is updated in place (refs - 1),
// under its lock, so recalls and appends of one attachment on several nodes count right;
// it is locked after the message, as the appender locks attachments after the
// conversations and before the users (see appendBatch).
const recallSQL = `WITH m AS (
		UPDATE messages SET content = NULL, extra = NULL, recalled = true
		WHERE conv_id = $1 AND seq = $2 AND NOT recalled RETURNING attachment_id),
	a AS (` + uncountSQL + ` WHERE id = (SELECT attachment_id FROM m))
	SELECT count(*) FROM m`

// uncountSQL takes one from an attachment's refs, in place, under the row's lock, and
// marks it idle since $3 when that leaves none: the uncount of a recall, hot (recallSQL)
// or cold (uncountSealedSQL). The caller adds the WHERE that names the attachment.
const uncountSQL = `UPDATE attachments SET refs = refs - 1, idle_since = CASE WHEN refs - 1 = 0 THEN $3::bigint ELSE 0 END`

// RecallMessage implements store.MessageWriter: one round trip for a message not yet
// recalled (recallSQL), a second only to tell an already recalled one from none.
func (t writeTx) RecallMessage(ctx context.Context, convID string, seq, at int64) error {
	what := fmt.Sprintf("recall message %q/%d", convID, seq)
	var recalled int64
	if err := t.tx.QueryRow(ctx, recallSQL, convID, seq, at).Scan(&recalled); err != nil {
		return translate(err, what)
	}
	if recalled > 0 {
		return nil
	}
	// Recalled before, or no such message: nulling again changes nothing, and the count
	// says which.
	tag, err := t.tx.Exec(ctx, `UPDATE messages SET content = NULL, extra = NULL, recalled = true
		WHERE conv_id = $1 AND seq = $2`, convID, seq)
	return expectOne(tag, err, store.ErrNotFound, "%s", what)
}

// eventsSQL joins the referenced message of "message" events only: the message is stored
// once per conversation, not copied into every member's log, so a recall shows in it.
const eventsSQL = `SELECT e.cursor, e.type, e.conv_id, e.ts, e.seq, e.data,
	m.msg_id, m.client_msg_id, m.sender_id, m.content_type, m.content, m.extra,
	m.created_at, m.recalled, m.mentions, m.attachment_id
	FROM events e LEFT JOIN messages m
		ON e.type = $1 AND m.conv_id = e.conv_id AND m.seq = e.seq
	WHERE e.user_id = $2 AND e.cursor > $3
	ORDER BY e.cursor LIMIT $4`

// Events implements store.EventReader. A limit of zero or less selects nothing.
func (t readTx) Events(ctx context.Context, userID string, after int64, limit int) ([]store.Event, error) {
	what := fmt.Sprintf("events of user %q", userID)
	rows, err := t.tx.Query(ctx, eventsSQL, protocol.EventMessage, userID, after, max(limit, 0))
	if err != nil {
		return nil, translate(err, what)
	}
	defer rows.Close()
	es := make([]store.Event, 0, min(max(limit, 0), protocol.MaxSyncLimit+1))
	for rows.Next() {
		e := store.Event{UserID: userID}
		var (
			msgID, clientMsgID, senderID *string
			attachmentID                 *string
			contentType                  *int
			createdAt                    *int64
			recalled                     *bool
			content, extra               []byte
			mentions                     []string
		)
		if err := rows.Scan(&e.Cursor, &e.Type, &e.ConvID, &e.TS, &e.Seq, &e.Data, &msgID,
			&clientMsgID, &senderID, &contentType, &content, &extra, &createdAt, &recalled,
			sqlrow.MentionsDest(&mentions), &attachmentID); err != nil {
			return nil, translate(err, what)
		}
		if msgID != nil {
			e.Message = &store.Message{ConvID: e.ConvID, Seq: e.Seq, MsgID: *msgID, ClientMsgID: *clientMsgID,
				SenderID: *senderID, ContentType: *contentType, Content: content, Extra: extra,
				CreatedAt: *createdAt, Recalled: *recalled, Mentions: mentions, AttachmentID: deref(attachmentID)}
		}
		es = append(es, e)
	}
	if err := rows.Err(); err != nil {
		return nil, translate(err, what)
	}
	return es, nil
}

// Cursors implements store.EventReader.
func (t readTx) Cursors(ctx context.Context, userID string) (store.CursorBounds, error) {
	var b store.CursorBounds
	err := t.tx.QueryRow(ctx, `SELECT last_cursor, pruned_cursor FROM users WHERE id = $1`, userID).Scan(&b.Last, &b.Pruned)
	if err != nil {
		return store.CursorBounds{}, translate(err, fmt.Sprintf("cursors of user %q", userID))
	}
	return b, nil
}

// AppendEvent implements store.EventWriter in one statement: the user's row is the
// counter, and its row lock, held to commit, makes concurrent appenders on any node take
// cursors one after another, so each user's cursors are gapless and commit in order.
func (t writeTx) AppendEvent(ctx context.Context, e store.Event) (int64, error) {
	var cursor int64
	err := t.tx.QueryRow(ctx, `WITH u AS (
			UPDATE users SET last_cursor = last_cursor + 1 WHERE id = $1 RETURNING id, last_cursor)
		INSERT INTO events (user_id, cursor, type, conv_id, ts, seq, data)
		SELECT id, last_cursor, $2, $3, $4, $5, $6 FROM u
		RETURNING cursor`, e.UserID, e.Type, e.ConvID, e.TS, e.Seq, e.Data).Scan(&cursor)
	if err != nil {
		return 0, translate(err, fmt.Sprintf("append event: user %q", e.UserID))
	}
	return cursor, nil
}

// expectOne turns a statement that touched no row into notOne (ErrNotFound for an UPDATE
// or DELETE, ErrExists for an INSERT ... ON CONFLICT DO NOTHING).
func expectOne(tag pgconn.CommandTag, err error, notOne error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	if err != nil {
		return translate(err, what)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: %s: %w", what, notOne)
	}
	return nil
}

// collect runs a query and scans every row with scan.
func collect[T any](ctx context.Context, q pgx.Tx, scan func(sqlrow.Row) (T, error), what, sql string, args ...any) ([]T, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, translate(err, what)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, translate(err, what)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, translate(err, what)
	}
	return out, nil
}

// The rows, read by the column lists above.
var (
	scanConversation = sqlrow.Conversation
	scanMember       = sqlrow.Member
	scanMembership   = sqlrow.Membership
)

// scanMessage reads msgCols: sqlrow.Message's columns, then attachment_id.
func scanMessage(r sqlrow.Row) (store.Message, error) {
	var id *string
	m, err := sqlrow.Message(extraColumn{r, &id})
	m.AttachmentID = deref(id)
	return m, err
}

// extraColumn is a row whose Scan reads one more column than its caller asks for, into
// dest.
type extraColumn struct {
	sqlrow.Row
	dest any
}

func (r extraColumn) Scan(dest ...any) error { return r.Row.Scan(append(dest, r.dest)...) }

// messageArgs are the values of msgCols for m, as messages and overlays store them.
func messageArgs(m store.Message) []any {
	return []any{m.ConvID, m.Seq, m.MsgID, m.ClientMsgID, m.SenderID, m.ContentType, m.Content, m.Extra,
		m.CreatedAt, m.Recalled, sqlrow.MentionsValue(m.Mentions), attachmentValue(m.AttachmentID)}
}

// attachmentValue is the attachment_id column of a message: NULL when it carries none, so
// that the message stays out of messages_by_attachment.
func attachmentValue(id string) *string {
	if id == "" {
		return nil
	}
	return &id
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// MessageAt bisects the hot messages by time (store.SearchMessageAt).
func (t readTx) MessageAt(ctx context.Context, convID string, ts int64) (int64, error) {
	return store.SearchMessageAt(ctx, t, convID, ts)
}

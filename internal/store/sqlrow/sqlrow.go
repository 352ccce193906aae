// Package sqlrow reads the store's rows from SQL result rows, once for both SQL backends
// (SQLite and PostgreSQL), whose column lists name the same columns in the same order.
package sqlrow

import "github.com/parleychat/parley/internal/store"

// Row is one result row: database/sql's *sql.Row and *sql.Rows, pgx's Row and Rows.
type Row interface{ Scan(dest ...any) error }

// Conversation reads id, type, name, owner_id, read_detail, max_seq, members_count,
// created_at, updated_at, read_from, mark.
func Conversation(r Row) (store.Conversation, error) {
	var c store.Conversation
	err := r.Scan(conversationDest(&c)...)
	return c, err
}

// Member reads conv_id, user_id, joined_at, ordinal, join_seq, cleared_seq, read_seq,
// delivered_seq, hidden.
func Member(r Row) (store.Member, error) {
	var m store.Member
	err := r.Scan(memberDest(&m)...)
	return m, err
}

// Membership reads a member's columns (as Member) followed by its conversation's (as
// Conversation).
func Membership(r Row) (store.Membership, error) {
	var m store.Membership
	err := r.Scan(append(memberDest(&m.Member), conversationDest(&m.Conversation)...)...)
	return m, err
}

// Message reads conv_id, seq, msg_id, client_msg_id, sender_id, content_type, content,
// extra, created_at, recalled.
func Message(r Row) (store.Message, error) {
	var m store.Message
	err := r.Scan(&m.ConvID, &m.Seq, &m.MsgID, &m.ClientMsgID, &m.SenderID, &m.ContentType,
		&m.Content, &m.Extra, &m.CreatedAt, &m.Recalled)
	return m, err
}

// PushTarget reads user_id, device_id, provider, token, topic, locale, registered_at,
// cursor.
func PushTarget(r Row) (store.PushTarget, error) {
	var t store.PushTarget
	err := r.Scan(&t.UserID, &t.DeviceID, &t.Provider, &t.Token, &t.Topic, &t.Locale,
		&t.RegisteredAt, &t.Cursor)
	return t, err
}

// Mute reads user_id, conv_id, until.
func Mute(r Row) (store.Mute, error) {
	var m store.Mute
	err := r.Scan(&m.UserID, &m.ConvID, &m.Until)
	return m, err
}

func conversationDest(c *store.Conversation) []any {
	return []any{&c.ID, &c.Type, &c.Name, &c.OwnerID, &c.ReadDetail, &c.MaxSeq, &c.MembersCount,
		&c.CreatedAt, &c.UpdatedAt, &c.ReadFrom, &c.Mark}
}

func memberDest(m *store.Member) []any {
	return []any{&m.ConvID, &m.UserID, &m.JoinedAt, &m.Ordinal, &m.JoinSeq, &m.ClearedSeq,
		&m.ReadSeq, &m.DeliveredSeq, &m.Hidden}
}

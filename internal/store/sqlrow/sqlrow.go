// Package sqlrow reads the store's rows from SQL result rows, once for both SQL backends
// (SQLite and PostgreSQL), whose column lists name the same columns in the same order.
package sqlrow

import (
	"encoding/json"
	"fmt"

	"github.com/parleychat/parley/internal/store"
)

// Row is one result row: database/sql's *sql.Row and *sql.Rows, pgx's Row and Rows.
type Row interface{ Scan(dest ...any) error }

// Conversation reads id, type, name, owner_id, read_detail, max_seq, members_count,
// created_at, updated_at, read_from, mark, retention_ms.
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
// extra, created_at, recalled, mentions.
func Message(r Row) (store.Message, error) {
	var m store.Message
	err := r.Scan(&m.ConvID, &m.Seq, &m.MsgID, &m.ClientMsgID, &m.SenderID, &m.ContentType,
		&m.Content, &m.Extra, &m.CreatedAt, &m.Recalled, MentionsDest(&m.Mentions))
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

// BusKey scans a cluster key: id, secret, created_at.
func BusKey(r Row) (store.BusKey, error) {
	var k store.BusKey
	err := r.Scan(&k.ID, &k.Secret, &k.CreatedAt)
	return k, err
}

// MentionsValue is the mentions column of a message: NULL when there are none, else the
// JSON array of the user ids, as text.
func MentionsValue(mentions []string) *string {
	if len(mentions) == 0 {
		return nil
	}
	b, _ := json.Marshal(mentions) // a []string always encodes
	s := string(b)
	return &s
}

// MentionsDest is a scan destination (a sql.Scanner, which pgx honours too) that reads the
// mentions column into *dst: nil for NULL.
func MentionsDest(dst *[]string) any { return mentionsDest{dst} }

type mentionsDest struct{ dst *[]string }

func (d mentionsDest) Scan(src any) error {
	var b []byte
	switch v := src.(type) {
	case nil:
		*d.dst = nil
		return nil
	case string:
		b = []byte(v)
	case []byte:
		b = v
	default:
		return fmt.Errorf("sqlrow: mentions column holds a %T", src)
	}
	var ms []string
	if err := json.Unmarshal(b, &ms); err != nil {
		return fmt.Errorf("sqlrow: mentions column: %w", err)
	}
	*d.dst = ms
	return nil
}

func conversationDest(c *store.Conversation) []any {
	return []any{&c.ID, &c.Type, &c.Name, &c.OwnerID, &c.ReadDetail, &c.MaxSeq, &c.MembersCount,
		&c.CreatedAt, &c.UpdatedAt, &c.ReadFrom, &c.Mark, &c.RetentionMS}
}

func memberDest(m *store.Member) []any {
	return []any{&m.ConvID, &m.UserID, &m.JoinedAt, &m.Ordinal, &m.JoinSeq, &m.ClearedSeq,
		&m.ReadSeq, &m.DeliveredSeq, &m.Hidden}
}

// SegmentCols is the column list of the cold tier's segments table, in the order Segment
// reads it; both engines name the columns alike.
const SegmentCols = `conv_id, first_seq, last_seq, first_ts, last_ts, key, count, bytes, raw_bytes, created_at, sealed`

// Segment reads SegmentCols.
func Segment(r Row) (store.Segment, error) {
	var s store.Segment
	err := r.Scan(&s.ConvID, &s.FirstSeq, &s.LastSeq, &s.FirstTS, &s.LastTS, &s.Key, &s.Count,
		&s.Bytes, &s.RawBytes, &s.CreatedAt, &s.Sealed)
	return s, err
}

// SegmentArgs are the values of SegmentCols for seg, recorded pending whatever seg.Sealed
// says (store.SegmentWriter.AddSegment).
func SegmentArgs(seg store.Segment) []any {
	return []any{seg.ConvID, seg.FirstSeq, seg.LastSeq, seg.FirstTS, seg.LastTS, seg.Key, seg.Count,
		seg.Bytes, seg.RawBytes, seg.CreatedAt, false}
}

// CheckSeal is SealSegment's check on what the engine read, under its lock, of the hot
// messages seg.FirstSeq..seg.LastSeq: stored is how many of those seqs hold a message
// (each at most one, by the (conv_id, seq) key), recalledNow how many of them are
// recalled. Every seq must be stored and exactly recalled recalled; else ErrConflict,
// before the engine has changed anything.
func CheckSeal(seg store.Segment, stored, recalledNow int64, recalled int) error {
	want := seg.LastSeq - seg.FirstSeq + 1
	if stored != want || recalledNow != int64(recalled) {
		return fmt.Errorf("seal segment %q: %d of %d messages %d..%d of %q stored hot, %d recalled, %d expected: %w",
			seg.Key, stored, want, seg.FirstSeq, seg.LastSeq, seg.ConvID, recalledNow, recalled, store.ErrConflict)
	}
	return nil
}

package sqlite

import (
	"context"
	"database/sql"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/sqlrow"
	"github.com/parleychat/parley/protocol"
)

// Events implements store.EventReader. A limit of zero or less selects nothing.
func (t readTx) Events(ctx context.Context, userID string, after int64, limit int) ([]store.Event, error) {
	rows, err := t.q.query(ctx, stEvents, protocol.EventMessage, userID, after, max(limit, 0))
	if err != nil {
		return nil, t.q.fail(err, "events of user %q", userID)
	}
	es, err := readEvents(rows, userID, limit)
	if err != nil {
		return nil, t.q.fail(err, "events of user %q", userID)
	}
	return es, nil
}

// eventRow holds the columns of one row of eventsSQL: an event and its LEFT JOINed message,
// whose columns are all NULL for other events (and for a message that no longer exists).
type eventRow struct {
	cursor, ts, seq              int64
	typ, convID                  string
	data, content, extra         sql.RawBytes
	msgID, clientMsgID, senderID sql.NullString
	attachmentID                 sql.NullString
	contentType, createdAt       sql.NullInt64
	recalled                     sql.NullBool
	mentions                     []string
}

// messageBlock is how many messages readEvents allocates at once.
const messageBlock = 64

// readEvents reads and closes the rows of eventsSQL. A catch-up reads thousands of rows, so
// the per-row costs that are not SQLite's own are kept down: the scan targets are allocated
// once per query rather than once per row (Scan's pointers make them escape), byte columns
// are copied into one growing buffer rather than each into its own, and messages are
// allocated in blocks.
func readEvents(rows *sql.Rows, userID string, limit int) ([]store.Event, error) {
	defer rows.Close()
	var r eventRow
	dest := []any{&r.cursor, &r.typ, &r.convID, &r.ts, &r.seq, &r.data, &r.msgID,
		&r.clientMsgID, &r.senderID, &r.contentType, &r.content, &r.extra, &r.createdAt, &r.recalled,
		sqlrow.MentionsDest(&r.mentions), &r.attachmentID}
	es := make([]store.Event, 0, min(max(limit, 0), protocol.MaxSyncLimit+1))
	var (
		buf   []byte
		block []store.Message
	)
	keep := func(raw sql.RawBytes) []byte { // a copy that outlives the row; NULL stays nil
		if raw == nil {
			return nil
		}
		start := len(buf)
		buf = append(buf, raw...)
		return buf[start:len(buf):len(buf)]
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		e := store.Event{UserID: userID, Cursor: r.cursor, Type: r.typ, ConvID: r.convID, TS: r.ts,
			Seq: r.seq, Data: keep(r.data)}
		if r.msgID.Valid {
			if len(block) == cap(block) {
				block = make([]store.Message, 0, messageBlock)
			}
			block = append(block, store.Message{
				ConvID: e.ConvID, Seq: e.Seq, MsgID: r.msgID.String, ClientMsgID: r.clientMsgID.String,
				SenderID: r.senderID.String, ContentType: int(r.contentType.Int64), Content: keep(r.content),
				Extra: keep(r.extra), CreatedAt: r.createdAt.Int64, Recalled: r.recalled.Bool,
				Mentions: r.mentions, AttachmentID: r.attachmentID.String,
			})
			e.Message = &block[len(block)-1]
		}
		es = append(es, e)
	}
	return es, rows.Err()
}

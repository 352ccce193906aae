package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/parleychat/parley/internal/store/sqlrow"
)

// stmtID names one prepared statement. Every statement is prepared once per connection
// pool and reused, so the hot path (a message send is about six statements) never parses
// SQL.
type stmtID int

const (
	// Reads.
	stUser stmtID = iota
	stConversation
	stMember
	stMembers
	stMembersAfter
	stLastOrdinal
	stMemberships
	stReadFanoutChanges
	stLastMark
	stMessage
	stMessageByClientID
	stMessagesAfter
	stMessagesBefore
	stEvents
	stCursors
	stPushTarget
	stPushTargets
	stPushTargetsAfter
	stMutes
	stBusKeys
	stAttachment
	stAttachmentRefs
	stAttachmentUsage
	stIdleAttachments
	stSegments
	stLastSegment
	stSegmentAtTime
	stPendingSegments
	stOverlays
	stConversationIDs
	numReadStmts // marks the end of the statements a read-only pool prepares

	// Writes.
	stCreateUser
	stSetTokenGen
	stSetPresenceHidden
	stCreateConversation
	stUpdateConversation
	stPutMember
	stDeleteMember
	stAdvancePositions
	stInsertMessage
	stRecallMessage
	stAppendEvent
	stPutEvent
	stPruneOldest
	stPruneUpTo
	stRaisePruned
	stPutPushTarget
	stDeletePushTarget
	stAdvancePushCursor
	stPutMute
	stDeleteMute
	stAddBusKey
	stAddAttachmentRef
	stDropAttachmentRef
	stCreateAttachment
	stCompleteAttachment
	stMarkAttachmentDeleting
	stAttachmentExists
	stDeleteAttachment
	stAddSegment
	stPendingSegment
	stSealCheck
	stSealRefs
	stSealDelete
	stSealMark
	stDeleteSegment
	stPutOverlay
	stDropSealedRef
	stDeleteSealedRef
	stExpireUncount
	stExpireDelete
	stSealedSegment
	stExpireOverlays
	stUnseal

	// Transaction control for group commit.
	stBegin
	stCommit
	stRollback
	stSavepoint
	stRelease
	stRollbackTo

	numStmts
)

// Column lists shared by several statements, in the order the scan helpers read them.
const (
	userCols   = `id, name, token_gen, created_at, presence_hidden`
	convCols   = `id, type, name, owner_id, read_detail, max_seq, members_count, created_at, updated_at, read_from, mark, retention_ms`
	memberCols = `conv_id, user_id, joined_at, ordinal, join_seq, cleared_seq, read_seq, delivered_seq, hidden`
	msgCols    = `conv_id, seq, msg_id, client_msg_id, sender_id, content_type, content, extra, created_at, recalled, mentions, attachment_id`
	attCols    = `id, owner_id, state, size, created_at, mime_type, sha256, width, height, duration_ms,
		thumbnail, preview, completed_at, refs, idle_since`
	pushCols = `user_id, device_id, provider, token, topic, locale, registered_at, cursor`
	muteCols = `user_id, conv_id, until`
	segCols  = sqlrow.SegmentCols
)

// statementSQL returns the text of every statement, indexed by stmtID. A function rather
// than a package variable, so that nothing mutable is shared between stores.
func statementSQL() [numStmts]string {
	return [numStmts]string{
		stUser:         `SELECT ` + userCols + ` FROM users WHERE id = ?`,
		stConversation: `SELECT ` + convCols + ` FROM conversations WHERE id = ?`,
		stMember:       `SELECT ` + memberCols + ` FROM members WHERE conv_id = ? AND user_id = ?`,
		stMembers:      `SELECT ` + memberCols + ` FROM members WHERE conv_id = ?`,
		stMembersAfter: `SELECT ` + memberCols + ` FROM members INDEXED BY members_by_ordinal
			WHERE conv_id = ? AND ordinal > ? ORDER BY ordinal, user_id LIMIT ?`,
		stLastOrdinal:       `SELECT coalesce(max(ordinal), 0) FROM members WHERE conv_id = ?`,
		stMemberships:       membershipsSQL,
		stReadFanoutChanges: membershipsSQL + ` AND c.read_from > 0 AND c.mark > ?`,
		stLastMark:          `SELECT coalesce(max(mark), 0) FROM conversations`,
		stMessage:           `SELECT ` + msgCols + ` FROM messages WHERE conv_id = ? AND seq = ?`,
		stMessageByClientID: `SELECT ` + msgCols + ` FROM messages WHERE sender_id = ? AND client_msg_id = ?`,
		stMessagesAfter: `SELECT ` + msgCols + ` FROM messages WHERE conv_id = ? AND seq > ?
			ORDER BY seq LIMIT ?`,
		stMessagesBefore: `SELECT ` + msgCols + ` FROM messages WHERE conv_id = ? AND seq > ? AND seq < ?
			ORDER BY seq DESC LIMIT ?`,
		stEvents: eventsSQL,
		stCursors: `SELECT max(u.pruned_cursor, coalesce(
			(SELECT max(e.cursor) FROM events e WHERE e.user_id = u.id), 0)), u.pruned_cursor
			FROM users u WHERE u.id = ?`,
		stPushTarget:  `SELECT ` + pushCols + ` FROM push_targets WHERE user_id = ? AND device_id = ?`,
		stPushTargets: `SELECT ` + pushCols + ` FROM push_targets WHERE user_id = ? ORDER BY device_id`,
		stPushTargetsAfter: `SELECT ` + pushCols + ` FROM push_targets WHERE (user_id, device_id) > (?, ?)
			ORDER BY user_id, device_id LIMIT ?`,
		stMutes:      `SELECT ` + muteCols + ` FROM mutes WHERE user_id = ? ORDER BY conv_id`,
		stBusKeys:    `SELECT id, secret, created_at FROM bus_keys ORDER BY id`,
		stAttachment: `SELECT ` + attCols + ` FROM attachments WHERE id = ?`,
		// attachment_id = ? implies the index's attachment_id IS NOT NULL, and recalled = 0
		// is its other term, so SQLite may use it; INDEXED BY makes sure it does.
		// The hot messages and the sealed ones (sealed_refs), never the same message twice:
		// sealing moves it from one to the other in one commit. Each side is a range of its
		// index, cut to the limit before the two are merged.
		stAttachmentRefs: `SELECT conv_id, seq FROM (
			SELECT * FROM (SELECT conv_id, seq FROM messages INDEXED BY messages_by_attachment
				WHERE attachment_id = ?1 AND recalled = 0 AND (conv_id, seq) > (?2, ?3)
				ORDER BY conv_id, seq LIMIT ?4)
			UNION ALL
			SELECT * FROM (SELECT conv_id, seq FROM sealed_refs INDEXED BY sealed_refs_by_attachment
				WHERE attachment_id = ?1 AND (conv_id, seq) > (?2, ?3)
				ORDER BY conv_id, seq LIMIT ?4))
			ORDER BY conv_id, seq LIMIT ?4`,
		stAttachmentUsage: `SELECT coalesce(sum(size), 0) FROM attachments INDEXED BY attachments_by_owner
			WHERE owner_id = ? AND created_at >= ?`,
		stIdleAttachments: `SELECT ` + attCols + ` FROM attachments INDEXED BY attachments_idle
			WHERE refs = 0 AND idle_since < ? ORDER BY idle_since, id LIMIT ?`,
		stSegments: `SELECT ` + segCols + ` FROM segments INDEXED BY segments_sealed
			WHERE conv_id = ? AND sealed = 1 AND last_seq >= ? ORDER BY last_seq LIMIT ?`,
		stLastSegment: `SELECT ` + segCols + ` FROM segments INDEXED BY segments_sealed
			WHERE conv_id = ? AND sealed = 1 ORDER BY last_seq DESC LIMIT 1`,
		stSegmentAtTime: `SELECT ` + segCols + ` FROM segments INDEXED BY segments_by_time
			WHERE conv_id = ? AND sealed = 1 AND last_ts >= ? ORDER BY last_ts, last_seq LIMIT 1`,
		stPendingSegments: `SELECT ` + segCols + ` FROM segments INDEXED BY segments_pending
			WHERE sealed = 0 ORDER BY key LIMIT ?`,
		stOverlays: `SELECT ` + msgCols + ` FROM overlays WHERE conv_id = ? AND seq >= ? AND seq <= ?
			ORDER BY seq`,
		stConversationIDs: `SELECT id FROM conversations WHERE id > ? ORDER BY id LIMIT ?`,

		stCreateUser:        `INSERT INTO users (` + userCols + `) VALUES (?, ?, ?, ?, ?)`,
		stSetTokenGen:       `UPDATE users SET token_gen = ? WHERE id = ?`,
		stSetPresenceHidden: `UPDATE users SET presence_hidden = ? WHERE id = ?`,
		stCreateConversation: `INSERT INTO conversations (` + convCols + `)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		stUpdateConversation: `UPDATE conversations SET type = ?, name = ?, owner_id = ?,
			read_detail = ?, max_seq = ?, members_count = ?, created_at = ?, updated_at = ?,
			read_from = ?, mark = ?, retention_ms = ? WHERE id = ?`,
		stPutMember: `INSERT INTO members (` + memberCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (conv_id, user_id) DO UPDATE SET joined_at = excluded.joined_at,
			ordinal = excluded.ordinal, join_seq = excluded.join_seq,
			cleared_seq = excluded.cleared_seq, read_seq = excluded.read_seq,
			delivered_seq = excluded.delivered_seq, hidden = excluded.hidden`,
		stDeleteMember: `DELETE FROM members WHERE conv_id = ? AND user_id = ?`,
		stAdvancePositions: `UPDATE members SET read_seq = max(read_seq, ?1), delivered_seq = max(delivered_seq, ?2)
			WHERE conv_id = ?3 AND user_id = ?4 AND (read_seq < ?1 OR delivered_seq < ?2)
			RETURNING ` + memberCols,
		stInsertMessage: `INSERT INTO messages (` + msgCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		stRecallMessage: `UPDATE messages SET content = NULL, extra = NULL, recalled = 1
			WHERE conv_id = ? AND seq = ?`,
		stAppendEvent: appendEventSQL,
		stPutEvent: `INSERT INTO events (user_id, cursor, type, conv_id, ts, seq, data)
			VALUES (?, ?, ?, ?, ?, ?, ?)`,
		stPruneOldest: `DELETE FROM events WHERE (user_id, cursor) IN (
			SELECT user_id, cursor FROM events WHERE ts < ? ORDER BY ts, user_id, cursor LIMIT ?)
			RETURNING user_id, cursor`,
		stPruneUpTo:   `DELETE FROM events WHERE user_id = ? AND cursor <= ?`,
		stRaisePruned: `UPDATE users SET pruned_cursor = max(pruned_cursor, ?) WHERE id = ?`,
		stPutPushTarget: `INSERT INTO push_targets (` + pushCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (user_id, device_id) DO UPDATE SET provider = excluded.provider,
			token = excluded.token, topic = excluded.topic, locale = excluded.locale,
			registered_at = excluded.registered_at, cursor = excluded.cursor`,
		stDeletePushTarget:  `DELETE FROM push_targets WHERE user_id = ? AND device_id = ?`,
		stAdvancePushCursor: `UPDATE push_targets SET cursor = max(cursor, ?) WHERE user_id = ? AND device_id = ?`,
		stPutMute: `INSERT INTO mutes (` + muteCols + `) VALUES (?, ?, ?)
			ON CONFLICT (user_id, conv_id) DO UPDATE SET until = excluded.until`,
		stDeleteMute: `DELETE FROM mutes WHERE user_id = ? AND conv_id = ?`,
		stAddBusKey:  `INSERT INTO bus_keys (id, secret, created_at) VALUES (?, ?, ?)`,
		// The single writer serializes the append's check and this increment; it is an
		// increment all the same, so that it stays right whoever else writes the row.
		stAddAttachmentRef: `UPDATE attachments SET refs = refs + 1, idle_since = 0 WHERE id = ?`,
		// Run before stRecallMessage, while the message still reads unrecalled: it takes one
		// from the attachment of a message recalled now for the first time, and nothing
		// otherwise.
		stDropAttachmentRef: dropAttachmentRefSQL(`SELECT attachment_id FROM messages
			WHERE conv_id = ?2 AND seq = ?3 AND recalled = 0`),
		stCreateAttachment: `INSERT INTO attachments (` + attCols + `)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		stCompleteAttachment: `UPDATE attachments SET state = ?, mime_type = ?, sha256 = ?, width = ?,
			height = ?, duration_ms = ?, thumbnail = ?, preview = ?, completed_at = ?
			WHERE id = ? AND state = ?`,
		stMarkAttachmentDeleting: `UPDATE attachments SET state = ?1
			WHERE id = ?2 AND (state = ?1 OR (refs = 0 AND idle_since < ?3))`,
		stAttachmentExists: `SELECT 1 FROM attachments WHERE id = ?`,
		stDeleteAttachment: `DELETE FROM attachments WHERE id = ?`,
		stAddSegment:       `INSERT INTO segments (` + segCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		stPendingSegment:   `SELECT ` + segCols + ` FROM segments WHERE key = ? AND sealed = 0`,
		// (conv_id, seq) is unique, so the count is how many of the seqs hold a message.
		stSealCheck: `SELECT count(*), coalesce(sum(recalled), 0) FROM messages
			WHERE conv_id = ? AND seq >= ? AND seq <= ?`,
		stSealRefs: `INSERT INTO sealed_refs (conv_id, seq, attachment_id)
			SELECT conv_id, seq, attachment_id FROM messages WHERE attachment_id IS NOT NULL AND recalled = 0 AND conv_id = ? AND seq >= ? AND seq <= ?`,
		stSealDelete:    `DELETE FROM messages WHERE conv_id = ? AND seq >= ? AND seq <= ?`,
		stSealMark:      `UPDATE segments SET sealed = 1 WHERE key = ?`,
		stDeleteSegment: `DELETE FROM segments WHERE key = ?`,
		stPutOverlay: `INSERT INTO overlays (` + msgCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (conv_id, seq) DO UPDATE SET msg_id = excluded.msg_id,
			client_msg_id = excluded.client_msg_id, sender_id = excluded.sender_id,
			content_type = excluded.content_type, content = excluded.content, extra = excluded.extra,
			created_at = excluded.created_at, recalled = excluded.recalled,
			mentions = excluded.mentions, attachment_id = excluded.attachment_id`,
		// Run before stDeleteSealedRef: the sealed message's count, taken once because the
		// row that names it goes with the first recall.
		stDropSealedRef:   dropAttachmentRefSQL(`SELECT attachment_id FROM sealed_refs WHERE conv_id = ?2 AND seq = ?3`),
		stDeleteSealedRef: `DELETE FROM sealed_refs WHERE conv_id = ? AND seq = ?`,
		// Run before stExpireDelete: one uncount per expired message not recalled, grouped
		// by attachment so that two messages carrying one attachment take two.
		stExpireUncount: `UPDATE attachments
			SET refs = max(refs - n.c, 0), idle_since = CASE WHEN refs <= n.c THEN ?1 ELSE idle_since END
			FROM (SELECT attachment_id, count(*) AS c FROM messages
				WHERE conv_id = ?2 AND seq <= ?3 AND attachment_id IS NOT NULL AND recalled = 0
				GROUP BY attachment_id) AS n
			WHERE attachments.id = n.attachment_id AND refs > 0`,
		stExpireDelete:   `DELETE FROM messages WHERE conv_id = ? AND seq <= ?`,
		stSealedSegment:  `SELECT ` + segCols + ` FROM segments WHERE key = ? AND sealed = 1`,
		stExpireOverlays: `DELETE FROM overlays WHERE conv_id = ? AND seq >= ? AND seq <= ?`,
		stUnseal:         `UPDATE segments SET sealed = 0 WHERE key = ?`,

		stBegin:      `BEGIN IMMEDIATE`,
		stCommit:     `COMMIT`,
		stRollback:   `ROLLBACK`,
		stSavepoint:  `SAVEPOINT request`,
		stRelease:    `RELEASE request`,
		stRollbackTo: `ROLLBACK TO request`,
	}
}

// dropAttachmentRefSQL takes one from the refs of the attachment that carrier (a query
// binding ?2, ?3 to a conversation and seq) names, and sets its idle_since to ?1 when that
// leaves none; nothing when carrier names none. It is the uncount of a recall, hot
// (stDropAttachmentRef) or cold (stDropSealedRef). refs > 0 keeps a message InsertMessage
// stored uncounted from taking the count below zero, where the collector would never see
// it idle.
func dropAttachmentRefSQL(carrier string) string {
	return `UPDATE attachments
		SET refs = refs - 1, idle_since = CASE WHEN refs = 1 THEN ?1 ELSE idle_since END
		WHERE id = (` + carrier + `) AND refs > 0`
}

const membershipsSQL = `SELECT m.conv_id, m.user_id, m.joined_at, m.ordinal, m.join_seq,
	m.cleared_seq, m.read_seq, m.delivered_seq, m.hidden,
	c.id, c.type, c.name, c.owner_id, c.read_detail, c.max_seq, c.members_count,
	c.created_at, c.updated_at, c.read_from, c.mark, c.retention_ms
	FROM members m JOIN conversations c ON c.id = m.conv_id
	WHERE m.user_id = ?`

// appendEventSQL stores an event under the user's next cursor in one statement: the last
// cursor is the highest event of the user (one seek at the end of the primary key), or the
// pruned bound when retention removed every event, so no counter row is rewritten per event.
// It inserts nothing, and returns no row, for an unknown user.
const appendEventSQL = `INSERT INTO events (user_id, cursor, type, conv_id, ts, seq, data)
	SELECT u.id, max(u.pruned_cursor, coalesce(
		(SELECT max(e.cursor) FROM events e WHERE e.user_id = u.id), 0)) + 1, ?, ?, ?, ?, ?
	FROM users u WHERE u.id = ?
	RETURNING cursor`

// eventsSQL joins the referenced message of "message" events only: the message is stored
// once per conversation, not copied into every member's log, so a recall shows in it.
const eventsSQL = `SELECT e.cursor, e.type, e.conv_id, e.ts, e.seq, e.data,
	m.msg_id, m.client_msg_id, m.sender_id, m.content_type, m.content, m.extra,
	m.created_at, m.recalled, m.mentions, m.attachment_id
	FROM events e LEFT JOIN messages m
		ON e.type = ? AND m.conv_id = e.conv_id AND m.seq = e.seq
	WHERE e.user_id = ? AND e.cursor > ?
	ORDER BY e.cursor LIMIT ?`

// statements holds the prepared form of every stmtID; a read-only pool leaves the write
// and control entries nil.
type statements [numStmts]*sql.Stmt

// preparer is what both *sql.Conn and *sql.DB offer for preparing.
type preparer interface {
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

// prepare prepares the statements [0, upTo) on p.
func prepare(ctx context.Context, p preparer, upTo stmtID) (*statements, error) {
	var st statements
	text := statementSQL()
	for id := stmtID(0); id < upTo; id++ {
		if id == numReadStmts {
			continue
		}
		s, err := p.PrepareContext(ctx, text[id])
		if err != nil {
			return nil, errors.Join(fmt.Errorf("sqlite: prepare %q: %w", text[id], err), st.close())
		}
		st[id] = s
	}
	return &st, nil
}

// close closes every prepared statement.
func (st *statements) close() error {
	var errs []error
	for i, s := range st {
		if s != nil {
			errs = append(errs, s.Close())
			st[i] = nil
		}
	}
	return errors.Join(errs...)
}

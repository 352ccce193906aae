package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// migrations returns the schema steps in order: step i brings the database from version i
// to version i+1 (PRAGMA user_version). Steps are append-only: a released step is never
// edited, a change is a new step.
func migrations() [][]string {
	return [][]string{schemaV1(), {
		// v2: read fanout (large groups): the first seq stored without events; 0 for write fanout.
		`ALTER TABLE conversations ADD COLUMN read_from INTEGER NOT NULL DEFAULT 0`,
	}, {
		// v3: the mark of a read-fanout conversation's latest message (store.MarkReader);
		// the store's latest mark is the highest, found by the index.
		`ALTER TABLE conversations ADD COLUMN mark INTEGER NOT NULL DEFAULT 0`,
		`CREATE INDEX conversations_by_mark ON conversations (mark)`,
	}, {
		// v4: members by standing, so that a page of a large group's members
		// (store.MemberReader.MembersAfter) and its last ordinal read only what they return.
		`CREATE INDEX members_by_ordinal ON members (conv_id, ordinal)`,
	}, {
		// v5: offline push (store.PushReader, store.PushWriter): each device's push target
		// with its push cursor, and each user's muted conversations. Both are read by their
		// primary keys only, in key order (BINARY, as the other backends order them).
		`CREATE TABLE push_targets (
			user_id       TEXT    NOT NULL,
			device_id     TEXT    NOT NULL,
			provider      TEXT    NOT NULL,
			token         TEXT    NOT NULL,
			topic         TEXT    NOT NULL,
			locale        TEXT    NOT NULL,
			registered_at INTEGER NOT NULL,
			cursor        INTEGER NOT NULL,
			PRIMARY KEY (user_id, device_id)
		) WITHOUT ROWID`,
		`CREATE TABLE mutes (
			user_id TEXT    NOT NULL,
			conv_id TEXT    NOT NULL,
			until   INTEGER NOT NULL,
			PRIMARY KEY (user_id, conv_id)
		) WITHOUT ROWID`,
	}, {
		// v6: the users a message mentions, a JSON array of user ids; NULL when none.
		`ALTER TABLE messages ADD COLUMN mentions TEXT`,
	}, {
		// v7: the bus's cluster keys (store.BusKeyReader, store.BusKeyWriter).
		`CREATE TABLE bus_keys (
			id         INTEGER NOT NULL PRIMARY KEY,
			secret     BLOB    NOT NULL,
			created_at INTEGER NOT NULL
		)`,
	}, {
		// v8: attachments (store.AttachmentReader, store.AttachmentWriter) and the one a
		// message carries. The table keeps its rowid: with a preview (a data: URL of up to
		// 1.5 KB) a row is too large for WITHOUT ROWID to pay. attachments_by_owner serves
		// AttachmentUsage (size included, so the sum reads the index only) and
		// attachments_idle IdleAttachments; both are immutable but for refs and
		// idle_since, which only an append or recall of a carrying message changes.
		`CREATE TABLE attachments (
			id           TEXT    NOT NULL PRIMARY KEY,
			owner_id     TEXT    NOT NULL,
			state        INTEGER NOT NULL,
			size         INTEGER NOT NULL,
			created_at   INTEGER NOT NULL,
			mime_type    TEXT    NOT NULL,
			sha256       TEXT    NOT NULL,
			width        INTEGER NOT NULL,
			height       INTEGER NOT NULL,
			duration_ms  INTEGER NOT NULL,
			thumbnail    INTEGER NOT NULL,
			preview      TEXT    NOT NULL,
			completed_at INTEGER NOT NULL,
			refs         INTEGER NOT NULL,
			idle_since   INTEGER NOT NULL
		)`,
		`CREATE INDEX attachments_by_owner ON attachments (owner_id, created_at, size)`,
		`CREATE INDEX attachments_idle ON attachments (idle_since, id) WHERE refs = 0`,
		// The attachment a message carries; NULL when none. The partial index holds only
		// the unrecalled messages that carry one (AttachmentRefs), so a send without an
		// attachment writes no index entry.
		`ALTER TABLE messages ADD COLUMN attachment_id TEXT`,
		`CREATE INDEX messages_by_attachment ON messages (attachment_id, conv_id, seq)
			WHERE attachment_id IS NOT NULL AND recalled = 0`,
	}, {
		// v9: the cold history tier (store.SegmentReader, store.SegmentWriter). segments is
		// its index, one row a blob, keyed by the blob's key; the reads see sealed rows only,
		// by segments_sealed (from a seq, the last) and segments_by_time (SegmentAtTime),
		// and the pending ones, few, by segments_pending.
		`CREATE TABLE segments (
			key        TEXT    NOT NULL PRIMARY KEY,
			conv_id    TEXT    NOT NULL,
			first_seq  INTEGER NOT NULL,
			last_seq   INTEGER NOT NULL,
			first_ts   INTEGER NOT NULL,
			last_ts    INTEGER NOT NULL,
			count      INTEGER NOT NULL,
			bytes      INTEGER NOT NULL,
			raw_bytes  INTEGER NOT NULL,
			created_at INTEGER NOT NULL,
			sealed     INTEGER NOT NULL
		) WITHOUT ROWID`,
		`CREATE INDEX segments_sealed ON segments (conv_id, last_seq) WHERE sealed = 1`,
		`CREATE INDEX segments_by_time ON segments (conv_id, last_ts, last_seq) WHERE sealed = 1`,
		`CREATE INDEX segments_pending ON segments (key) WHERE sealed = 0`,
		// The current version of each cold message that changed after it was sealed (a
		// recall): the columns of messages, keyed as it is. It keeps its rowid for the
		// reason messages does (content of up to 64 KiB).
		`CREATE TABLE overlays (
			conv_id       TEXT    NOT NULL,
			seq           INTEGER NOT NULL,
			msg_id        TEXT    NOT NULL,
			client_msg_id TEXT    NOT NULL,
			sender_id     TEXT    NOT NULL,
			content_type  INTEGER NOT NULL,
			content       BLOB,
			extra         BLOB,
			created_at    INTEGER NOT NULL,
			recalled      INTEGER NOT NULL,
			mentions      TEXT,
			attachment_id TEXT,
			UNIQUE (conv_id, seq)
		)`,
		// The sealed messages that still count in their attachment's refs: what
		// messages_by_attachment listed of them before SealSegment deleted their rows, so
		// that AttachmentRefs goes on listing them, until a recall in the overlay removes
		// the row and uncounts it (the row is what makes that happen once).
		`CREATE TABLE sealed_refs (
			conv_id       TEXT    NOT NULL,
			seq           INTEGER NOT NULL,
			attachment_id TEXT    NOT NULL,
			PRIMARY KEY (conv_id, seq)
		) WITHOUT ROWID`,
		`CREATE INDEX sealed_refs_by_attachment ON sealed_refs (attachment_id, conv_id, seq)`,
	}, {
		// v10: a group's own retention, set by its owner, in ms (store.Conversation
		// RetentionMS); 0 follows the operator's.
		`ALTER TABLE conversations ADD COLUMN retention_ms INTEGER NOT NULL DEFAULT 0`,
	}, {
		// v11: a user who hides their presence (store.User PresenceHidden); 0 shows it.
		`ALTER TABLE users ADD COLUMN presence_hidden INTEGER NOT NULL DEFAULT 0`,
	}}
}

// schemaV1 is the initial schema.
//
// Small, hot tables are WITHOUT ROWID so that each row lives in its primary-key b-tree
// only. A user's last cursor is not stored: it is the highest key of the user's events (or
// pruned_cursor once retention removed them all), so an AppendEvent writes one events row
// and no counter.
// messages keeps a rowid because a row may carry up to 64 KiB of content, and SQLite
// advises WITHOUT ROWID only for rows far smaller than a page.
//
// There are no foreign keys: referential rules belong to package chat, and enforcing them
// here would add a lookup per insert and an error the store contract does not define.
func schemaV1() []string {
	return []string{
		`CREATE TABLE users (
			id            TEXT    NOT NULL PRIMARY KEY,
			name          TEXT    NOT NULL,
			token_gen     INTEGER NOT NULL,
			created_at    INTEGER NOT NULL,
			pruned_cursor INTEGER NOT NULL DEFAULT 0
		) WITHOUT ROWID`,
		`CREATE TABLE conversations (
			id            TEXT    NOT NULL PRIMARY KEY,
			type          TEXT    NOT NULL,
			name          TEXT    NOT NULL,
			owner_id      TEXT    NOT NULL,
			read_detail   INTEGER NOT NULL,
			max_seq       INTEGER NOT NULL,
			members_count INTEGER NOT NULL,
			created_at    INTEGER NOT NULL,
			updated_at    INTEGER NOT NULL
		) WITHOUT ROWID`,
		`CREATE TABLE members (
			conv_id       TEXT    NOT NULL,
			user_id       TEXT    NOT NULL,
			joined_at     INTEGER NOT NULL,
			ordinal       INTEGER NOT NULL,
			join_seq      INTEGER NOT NULL,
			cleared_seq   INTEGER NOT NULL,
			read_seq      INTEGER NOT NULL,
			delivered_seq INTEGER NOT NULL,
			hidden        INTEGER NOT NULL,
			PRIMARY KEY (conv_id, user_id)
		) WITHOUT ROWID`,
		`CREATE INDEX members_by_user ON members (user_id)`,
		`CREATE TABLE messages (
			conv_id       TEXT    NOT NULL,
			seq           INTEGER NOT NULL,
			msg_id        TEXT    NOT NULL,
			client_msg_id TEXT    NOT NULL,
			sender_id     TEXT    NOT NULL,
			content_type  INTEGER NOT NULL,
			content       BLOB,
			extra         BLOB,
			created_at    INTEGER NOT NULL,
			recalled      INTEGER NOT NULL,
			UNIQUE (conv_id, seq),
			UNIQUE (msg_id),
			UNIQUE (sender_id, client_msg_id)
		)`,
		`CREATE TABLE events (
			user_id TEXT    NOT NULL,
			cursor  INTEGER NOT NULL,
			type    TEXT    NOT NULL,
			conv_id TEXT    NOT NULL,
			ts      INTEGER NOT NULL,
			seq     INTEGER NOT NULL,
			data    BLOB,
			PRIMARY KEY (user_id, cursor)
		) WITHOUT ROWID`,
		`CREATE INDEX events_by_ts ON events (ts)`,
	}
}

// migrate brings the database on conn to the latest schema version. Each step runs in its
// own IMMEDIATE transaction that re-reads the version under the write lock, so two
// processes opening the same directory at once cannot apply a step twice, and a failed
// step leaves the previous version intact. Running it on an up-to-date database does
// nothing.
func migrate(ctx context.Context, conn *sql.Conn) error {
	steps := migrations()
	for {
		done, err := migrateStep(ctx, conn, steps)
		if err != nil || done {
			return err
		}
	}
}

// migrateStep applies the next pending step, or reports done when there is none.
func migrateStep(ctx context.Context, conn *sql.Conn, steps [][]string) (done bool, err error) {
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		return false, fmt.Errorf("sqlite: migrate: %w", err)
	}
	defer func() {
		if err != nil || done {
			_, rbErr := conn.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`)
			if err != nil {
				err = errors.Join(err, rbErr)
			}
		}
	}()
	version, err := schemaVersion(ctx, conn)
	if err != nil {
		return false, err
	}
	switch {
	case version == len(steps):
		return true, nil
	case version > len(steps):
		return false, fmt.Errorf("sqlite: migrate: database schema version %d is newer than this binary's %d",
			version, len(steps))
	}
	for _, q := range steps[version] {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return false, fmt.Errorf("sqlite: migrate to version %d: %w", version+1, err)
		}
	}
	// PRAGMA takes no bound parameters; version is an int, so formatting it is safe.
	if _, err := conn.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, version+1)); err != nil {
		return false, fmt.Errorf("sqlite: migrate: set version: %w", err)
	}
	if _, err := conn.ExecContext(ctx, `COMMIT`); err != nil {
		return false, fmt.Errorf("sqlite: migrate to version %d: commit: %w", version+1, err)
	}
	return false, nil
}

// schemaVersion reads the schema version stored in the database header.
func schemaVersion(ctx context.Context, conn *sql.Conn) (int, error) {
	var v int
	if err := conn.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return 0, fmt.Errorf("sqlite: read schema version: %w", err)
	}
	return v, nil
}

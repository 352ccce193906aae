package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// migrations returns the schema steps in order: step i brings the schema from version i to
// version i+1 (the one row of parley_schema). Steps are append-only: a released step is
// never edited, a change is a new step.
func migrations() [][]string {
	return [][]string{schemaV1(), {
		// v2: offline push (store.PushReader, store.PushWriter): each device's push target
		// with its push cursor, and each user's muted conversations. The key columns are
		// COLLATE "C" so that the primary keys, which every read scans in order, order ids
		// byte by byte as the embedded engines do, whatever the database's collation.
		`CREATE TABLE push_targets (
			user_id       text COLLATE "C" NOT NULL,
			device_id     text COLLATE "C" NOT NULL,
			provider      text   NOT NULL,
			token         text   NOT NULL,
			topic         text   NOT NULL,
			locale        text   NOT NULL,
			registered_at bigint NOT NULL,
			cursor        bigint NOT NULL,
			PRIMARY KEY (user_id, device_id)
		)`,
		`CREATE TABLE mutes (
			user_id text COLLATE "C" NOT NULL,
			conv_id text COLLATE "C" NOT NULL,
			until   bigint NOT NULL,
			PRIMARY KEY (user_id, conv_id)
		)`,
	}, {
		// v3: the users a message mentions, a JSON array of user ids as text; NULL when none.
		`ALTER TABLE messages ADD COLUMN mentions text`,
	}, {
		// v4: the bus's cluster keys (store.BusKeyReader, store.BusKeyWriter).
		`CREATE TABLE bus_keys (
			id         bigint NOT NULL PRIMARY KEY,
			secret     bytea  NOT NULL,
			created_at bigint NOT NULL
		)`,
	}, {
		// v5: attachments (store.AttachmentReader, store.AttachmentWriter). refs and
		// idle_since are counters that the append and the recall of a message carrying the
		// attachment change in place, under the row's lock (see appendBatch and
		// RecallMessage), so that several nodes count right. by_owner serves the quota's
		// sum, idle the collector's scan; messages_by_attachment lists the messages that
		// still carry one (AttachmentRefs), in byte order of the conversation id, and holds
		// no entry for the messages without.
		`CREATE TABLE attachments (
			id           text COLLATE "C" NOT NULL PRIMARY KEY,
			owner_id     text COLLATE "C" NOT NULL,
			state        integer NOT NULL,
			size         bigint  NOT NULL,
			created_at   bigint  NOT NULL,
			mime_type    text    NOT NULL,
			sha256       text    NOT NULL,
			width        integer NOT NULL,
			height       integer NOT NULL,
			duration_ms  bigint  NOT NULL,
			thumbnail    boolean NOT NULL,
			preview      text    NOT NULL,
			completed_at bigint  NOT NULL,
			refs         bigint  NOT NULL,
			idle_since   bigint  NOT NULL
		)`,
		`CREATE INDEX attachments_by_owner ON attachments (owner_id, created_at)`,
		`CREATE INDEX attachments_idle ON attachments (idle_since, id) WHERE refs = 0`,
		`ALTER TABLE messages ADD COLUMN attachment_id text COLLATE "C"`,
		`CREATE INDEX messages_by_attachment ON messages (attachment_id, conv_id COLLATE "C", seq)
			WHERE attachment_id IS NOT NULL AND NOT recalled`,
	}, {
		// v6: the cold history tier (store.SegmentReader, store.SegmentWriter). segments is
		// its index, one row a blob, keyed by the blob's key; the reads see sealed rows only,
		// by segments_sealed (from a seq, the last) and segments_by_time (SegmentAtTime),
		// and the pending ones, few, by segments_pending, in byte order of the key.
		`CREATE TABLE segments (
			key        text COLLATE "C" NOT NULL PRIMARY KEY,
			conv_id    text    NOT NULL,
			first_seq  bigint  NOT NULL,
			last_seq   bigint  NOT NULL,
			first_ts   bigint  NOT NULL,
			last_ts    bigint  NOT NULL,
			count      integer NOT NULL,
			bytes      bigint  NOT NULL,
			raw_bytes  bigint  NOT NULL,
			created_at bigint  NOT NULL,
			sealed     boolean NOT NULL
		)`,
		`CREATE INDEX segments_sealed ON segments (conv_id, last_seq) WHERE sealed`,
		`CREATE INDEX segments_by_time ON segments (conv_id, last_ts, last_seq) WHERE sealed`,
		`CREATE INDEX segments_pending ON segments (key) WHERE NOT sealed`,
		// The current version of each cold message that changed after it was sealed (a
		// recall): the columns of messages, as they stand at this step, keyed as it is.
		`CREATE TABLE overlays (LIKE messages)`,
		`ALTER TABLE overlays ADD PRIMARY KEY (conv_id, seq)`,
		// The sealed messages that still count in their attachment's refs: what
		// messages_by_attachment listed of them before SealSegment deleted their rows, so
		// that AttachmentRefs goes on listing them, until a recall in the overlay deletes
		// the row and uncounts it (deleting the row is what makes that happen once, on any
		// number of nodes).
		`CREATE TABLE sealed_refs (
			conv_id       text COLLATE "C" NOT NULL,
			seq           bigint NOT NULL,
			attachment_id text COLLATE "C" NOT NULL,
			PRIMARY KEY (conv_id, seq)
		)`,
		`CREATE INDEX sealed_refs_by_attachment ON sealed_refs (attachment_id, conv_id, seq)`,
		// ConversationIDs pages the ids in byte order, as the embedded engines do, whatever
		// the database's collation (the primary key's).
		`CREATE INDEX conversations_by_id_bytes ON conversations (id COLLATE "C")`,
	}, {
		// v7: a group's own retention, set by its owner, in ms (store.Conversation
		// RetentionMS); 0 follows the operator's.
		`ALTER TABLE conversations ADD COLUMN retention_ms bigint NOT NULL DEFAULT 0`,
	}, {
		// v8: a user who hides their presence (store.User PresenceHidden); false shows it.
		`ALTER TABLE users ADD COLUMN presence_hidden boolean NOT NULL DEFAULT false`,
	}}
}

// schemaV1 is the initial schema.
//
// Unlike the embedded engines, a user's last cursor is a column: the row is what several
// nodes lock to hand out cursors in commit order (UPDATE ... SET last_cursor = last_cursor
// + n), where an embedded writer can read the highest event instead. store_state holds the
// store-wide mark of read-fanout conversations for the same reason: a sequence would hand
// out marks that commit out of order (docs/design.md, "Several nodes").
//
// Content and extra are bytea, not jsonb: the store keeps the client's bytes as sent, and
// jsonb would reorder keys and collapse duplicates. messages has no index on msg_id: it is
// a random 128-bit id the chat layer generates, and every send would pay for the index.
//
// There are no foreign keys: referential rules belong to package chat (as in the embedded
// engines), and each key would add a lookup and a share lock to every insert.
func schemaV1() []string {
	return []string{
		`CREATE TABLE users (
			id            text   NOT NULL PRIMARY KEY,
			name          text   NOT NULL,
			token_gen     bigint NOT NULL,
			created_at    bigint NOT NULL,
			last_cursor   bigint NOT NULL DEFAULT 0,
			pruned_cursor bigint NOT NULL DEFAULT 0
		)`,
		`CREATE TABLE conversations (
			id            text    NOT NULL PRIMARY KEY,
			type          text    NOT NULL,
			name          text    NOT NULL,
			owner_id      text    NOT NULL,
			read_detail   boolean NOT NULL,
			max_seq       bigint  NOT NULL,
			members_count integer NOT NULL,
			created_at    bigint  NOT NULL,
			updated_at    bigint  NOT NULL,
			read_from     bigint  NOT NULL DEFAULT 0,
			mark          bigint  NOT NULL DEFAULT 0
		)`,
		`CREATE INDEX conversations_by_mark ON conversations (mark) WHERE mark > 0`,
		`CREATE TABLE members (
			conv_id       text    NOT NULL,
			user_id       text    NOT NULL,
			joined_at     bigint  NOT NULL,
			ordinal       bigint  NOT NULL,
			join_seq      bigint  NOT NULL,
			cleared_seq   bigint  NOT NULL,
			read_seq      bigint  NOT NULL,
			delivered_seq bigint  NOT NULL,
			hidden        boolean NOT NULL,
			PRIMARY KEY (conv_id, user_id)
		)`,
		`CREATE INDEX members_by_user ON members (user_id)`,
		`CREATE INDEX members_by_ordinal ON members (conv_id, ordinal)`,
		`CREATE TABLE messages (
			conv_id       text    NOT NULL,
			seq           bigint  NOT NULL,
			msg_id        text    NOT NULL,
			client_msg_id text    NOT NULL,
			sender_id     text    NOT NULL,
			content_type  integer NOT NULL,
			content       bytea,
			extra         bytea,
			created_at    bigint  NOT NULL,
			recalled      boolean NOT NULL,
			PRIMARY KEY (conv_id, seq),
			UNIQUE (sender_id, client_msg_id)
		)`,
		`CREATE TABLE events (
			user_id text   NOT NULL,
			cursor  bigint NOT NULL,
			type    text   NOT NULL,
			conv_id text   NOT NULL,
			ts      bigint NOT NULL,
			seq     bigint NOT NULL,
			data    bytea,
			PRIMARY KEY (user_id, cursor)
		)`,
		`CREATE INDEX events_by_ts ON events (ts)`,
		`CREATE TABLE store_state (
			one  boolean PRIMARY KEY DEFAULT true CHECK (one),
			mark bigint  NOT NULL
		)`,
		`INSERT INTO store_state (mark) VALUES (0)`,
		// The node-wide secrets (token signing key, direct-conversation id key, admin
		// secret) that an embedded node keeps in its data directory: every node must share
		// them, and the database is what they share.
		`CREATE TABLE secrets (
			name  text NOT NULL PRIMARY KEY,
			value text NOT NULL
		)`,
	}
}

// migrationLock is the key of the advisory lock migrate holds, so that nodes started at
// once apply each step exactly once (an arbitrary constant: "parley" in ASCII).
const migrationLock = 0x7061726c6579

// migrate brings the schema on the pool's search_path up to date. It holds a
// transaction-level advisory lock and re-reads the version under it, and each step commits
// with its version, so nodes started together cannot apply a step twice and a failed step
// leaves the previous version intact. On an up-to-date schema it does nothing.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	steps := migrations()
	for {
		done, err := migrateStep(ctx, pool, steps)
		if err != nil || done {
			return err
		}
	}
}

// migrateStep applies the next pending step in one transaction, or reports done.
func migrateStep(ctx context.Context, pool *pgxpool.Pool, steps [][]string) (done bool, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLock)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS parley_schema (
			one boolean PRIMARY KEY DEFAULT true CHECK (one), version integer NOT NULL)`); err != nil {
			return err
		}
		var version int
		err := tx.QueryRow(ctx, `SELECT version FROM parley_schema`).Scan(&version)
		if err == pgx.ErrNoRows {
			version = 0
			if _, err := tx.Exec(ctx, `INSERT INTO parley_schema (version) VALUES (0)`); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		switch {
		case version == len(steps):
			done = true
			return nil
		case version > len(steps):
			return fmt.Errorf("schema version %d is newer than this binary's %d", version, len(steps))
		}
		for _, q := range steps[version] {
			if _, err := tx.Exec(ctx, q); err != nil {
				return fmt.Errorf("to version %d: %w", version+1, err)
			}
		}
		_, err = tx.Exec(ctx, `UPDATE parley_schema SET version = $1`, version+1)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("postgres: migrate: %w", err)
	}
	return done, nil
}

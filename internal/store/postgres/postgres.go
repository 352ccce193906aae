// Package postgres is Parley's PostgreSQL backend, for running several stateless nodes on
// one database (docs/deployment.md). It implements the same store contract as the
// embedded engines, checked by the same conformance suite, with several processes writing
// at once at READ COMMITTED.
//
// The contract's guarantees come from row locks, not from a single writer:
//   - A conversation's seq, a user's cursor and the store-wide mark are counters in rows
//     (conversations.max_seq, users.last_cursor, store_state.mark). Whoever raises one holds
//     its row lock until commit, so values are handed out gapless and become visible in
//     order, on any number of nodes.
//   - Point reads inside an Update lock the row they read (FOR UPDATE), so an fn's
//     read-modify-write of a row is atomic, as with one writer.
//   - Positions only move forward: AdvancePositions is GREATEST in the UPDATE itself.
//
// Sends are group-committed per node: AppendMessage queues the message, and one goroutine
// takes every queued append as a batch and writes it with two round trips and a dozen
// set-based statements, whatever the batch's size (see appender). Other Updates run each
// in its own transaction on the pool.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/parleychat/parley/internal/redact"
	"github.com/parleychat/parley/internal/store"
)

// Options configures Open. Zero values select the defaults.
type Options struct {
	// URL is the connection string (postgres://user@host:port/db?sslmode=...; pgx's syntax,
	// including search_path to put Parley's tables in a schema of their own). Required.
	URL string
	// MaxConns caps the node's connections. Default 16: one for the appender, the rest for
	// Views and Updates, which hold a connection for a few round trips each.
	MaxConns int
	// MaxBatch caps how many appends share one transaction. Default 256.
	MaxBatch int
	// BatchWait is how long the appender waits for more appends before it starts a batch,
	// when the previous batch held several and this one holds fewer than 32: under
	// concurrent load a batch then carries what the next milliseconds bring instead of what
	// happened to be queued, and the database's work per message (seven statements and a
	// commit per batch) falls, most with several nodes, each with a share of the load; a
	// lone sender (batches of one) never waits, nor does a batch already full. Default
	// 2ms. Longer trades latency for throughput: 6ms gave three saturated nodes 15 % more
	// and a moderate load up to 6-10 ms more per send (docs/design.md, "Waiting for company");
	// negative turns it off.
	BatchWait time.Duration
	// AppendTimeout bounds one batch of appends, retries included: a database that does not
	// answer fails the batch with ErrUnavailable rather than holding its senders. Default 10s.
	AppendTimeout time.Duration
}

func (o Options) withDefaults() (Options, error) {
	if o.URL == "" {
		return o, errors.New("postgres: Options.URL is required")
	}
	if o.MaxConns < 0 || o.MaxBatch < 0 || o.AppendTimeout < 0 {
		return o, errors.New("postgres: Options.MaxConns, MaxBatch and AppendTimeout must not be negative")
	}
	if o.MaxConns == 0 {
		o.MaxConns = 16
	}
	o.MaxConns = max(o.MaxConns, 2) // the appender's connection and at least one other
	if o.MaxBatch == 0 {
		o.MaxBatch = 256
	}
	if o.BatchWait == 0 {
		o.BatchWait = 2 * time.Millisecond
	}
	if o.AppendTimeout == 0 {
		o.AppendTimeout = 10 * time.Second
	}
	return o, nil
}

// Store is the PostgreSQL backend. It is safe for concurrent use.
type Store struct {
	opts Options
	pool *pgxpool.Pool
	ap   *appender

	// connCfg is what Lead connects with: the pool's settings, on a connection of its own.
	connCfg *pgx.ConnConfig

	// mu guards closed; calls hold it shared for their duration, so Close waits for them
	// before closing the pool.
	mu     sync.RWMutex
	closed bool
	// leads holds the leads Lead gave that are neither released nor lost (see Lead); nil
	// once Close took them to end them. closing is closed by Close, ending Leads that wait.
	leadMu  sync.Mutex
	leads   map[*lead]struct{}
	closing chan struct{}
}

var _ store.Store = (*Store)(nil)
var _ store.SecretKeeper = (*Store)(nil) // the nodes sharing the database share their secrets through it

// Open connects to the database, brings the schema up to date and starts the appender.
// Close releases them. A URL that names no sslmode gets one (withTLSDefault): disable for
// a loopback host or a unix socket, verify-full for any other. Its errors never show the
// URL's password.
func Open(ctx context.Context, opts Options) (*Store, error) {
	s, err := open(ctx, opts)
	return s, redact.Error(err, opts.URL)
}

func open(ctx context.Context, opts Options) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	connString, chosen, err := withTLSDefault(opts.URL, os.Getenv)
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse URL: %w", err)
	}
	cfg.MaxConns = int32(opts.MaxConns - 1)
	// No JIT: every statement here is short, and compiling one costs 100-300 ms. The
	// appender's plans below are costed above jit_above_cost whenever a table has no index
	// to use (enable_seqscan=off adds 1e10), so with JIT on a batch touching the one-row
	// store_state table spent 300 ms compiling, under its locks.
	cfg.ConnConfig.RuntimeParams["jit"] = "off"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	apCfg := cfg.Copy()
	apCfg.MaxConns = 1
	// The appender's statements are lookups and writes by primary or unique key, for any
	// number of keys (unnest of arrays), whose best plan is an index probe per key whatever
	// the tables hold: its connection plans each statement once (generic plans) and never
	// with a sequential scan, hash or merge join. Left to the planner, a plan made while a
	// table was small (a new database, or statistics not yet gathered) scans the table, and
	// a prepared statement keeps its generic plan as the table grows: a dedup lookup read
	// every message of the database in each batch.
	for k, v := range map[string]string{"plan_cache_mode": "force_generic_plan",
		"enable_seqscan": "off", "enable_hashjoin": "off", "enable_mergejoin": "off"} {
		apCfg.ConnConfig.RuntimeParams[k] = v
	}
	apPool, err := pgxpool.NewWithConfig(ctx, apCfg)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		apPool.Close()
		if chosen == RemoteSSLMode { // the likely cause when a server without TLS refuses
			err = fmt.Errorf("%w (the URL names no sslmode, so sslmode=%s was used: docs/deployment.md, \"PostgreSQL TLS\")", err, chosen)
		}
		return nil, err
	}
	s := &Store{opts: opts, pool: pool, connCfg: cfg.ConnConfig.Copy(), leads: make(map[*lead]struct{}),
		closing: make(chan struct{})}
	s.ap = newAppender(apPool, opts)
	return s, nil
}

// enter marks the start of a call; it fails once the store is closed. The caller must call
// s.mu.RUnlock when done.
func (s *Store) enter(what string) error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return unavailable(what)
	}
	return nil
}

// Update implements store.Store: fn runs in its own READ COMMITTED transaction, with its
// point reads locking their rows (see readTx.lock). Transactions that lock rows in
// different orders can deadlock (two users creating their direct conversation at once);
// PostgreSQL then rolls one back, and Update runs its fn again, as the contract allows.
func (s *Store) Update(ctx context.Context, fn func(tx store.Tx) error) error {
	if err := s.enter("update"); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	for attempt := 1; ; attempt++ {
		err := s.updateOnce(ctx, fn)
		if !retryable(err) || attempt == maxAttempts || ctx.Err() != nil {
			return err
		}
		time.Sleep(time.Duration(attempt) * time.Millisecond) // let the other transaction finish
	}
}

func (s *Store) updateOnce(ctx context.Context, fn func(tx store.Tx) error) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return translate(err, "begin")
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // after Commit, a no-op
	if err := fn(writeTx{readTx{tx: tx, lock: " FOR UPDATE"}}); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: commit: %w: %w", store.ErrUnavailable, err)
	}
	return nil
}

// View implements store.Store on a REPEATABLE READ, READ ONLY transaction: one snapshot
// for every statement of fn.
func (s *Store) View(ctx context.Context, fn func(tx store.ReadTx) error) error {
	if err := s.enter("view"); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return translate(err, "begin view")
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	return fn(readTx{tx: tx})
}

// AppendMessage implements store.Store: StartAppend, then Wait.
func (s *Store) AppendMessage(ctx context.Context, m store.Message) (store.Appended, error) {
	return store.StartAndWait(ctx, s, m)
}

// StartAppend implements store.Store by queueing m for the appender, which applies queued
// appends in queue order, one batch at a time.
func (s *Store) StartAppend(ctx context.Context, m store.Message) (store.PendingAppend, error) {
	if err := s.enter("append"); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	return s.ap.start(ctx, m)
}

// PruneEvents implements store.Store in one transaction: it removes the oldest events,
// then, for each user they belonged to, every event at or below the highest cursor removed
// (so that a clock step backwards leaves none behind), and raises the user's pruned bound.
// The users' rows are locked in id order, the order the appender locks them in.
func (s *Store) PruneEvents(ctx context.Context, before int64, limit int) (int, error) {
	if err := s.enter("prune events"); err != nil {
		return 0, err
	}
	defer s.mu.RUnlock()
	removed := 0
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `DELETE FROM events WHERE (user_id, cursor) IN (
			SELECT user_id, cursor FROM events WHERE ts < $1 ORDER BY ts, user_id, cursor LIMIT $2)
			RETURNING user_id, cursor`, before, max(limit, 0))
		if err != nil {
			return err
		}
		highest := make(map[string]int64)
		for rows.Next() {
			var u string
			var c int64
			if err := rows.Scan(&u, &c); err != nil {
				return err
			}
			highest[u] = max(highest[u], c)
			removed++
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(highest) == 0 {
			return nil
		}
		users := make([]string, 0, len(highest))
		for u := range highest {
			users = append(users, u)
		}
		slices.Sort(users)
		cursors := make([]int64, len(users))
		for i, u := range users {
			cursors[i] = highest[u]
		}
		if _, err := tx.Exec(ctx, `SELECT 1 FROM users WHERE id = ANY($1) ORDER BY id FOR UPDATE`, users); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM events e USING unnest($1::text[], $2::bigint[]) AS v(id, c)
			WHERE e.user_id = v.id AND e.cursor <= v.c`, users, cursors)
		if err != nil {
			return err
		}
		removed += int(tag.RowsAffected())
		_, err = tx.Exec(ctx, `UPDATE users u SET pruned_cursor = GREATEST(u.pruned_cursor, v.c)
			FROM unnest($1::text[], $2::bigint[]) AS v(id, c) WHERE u.id = v.id`, users, cursors)
		return err
	})
	if err != nil {
		return 0, translate(err, "prune events")
	}
	return removed, nil
}

// Secret returns the secret stored under name, storing create's answer first when there is
// none: nodes started together all get the one that was stored first. created reports
// that this call stored it.
func (s *Store) Secret(ctx context.Context, name string, create func() (string, error)) (secret string, created bool, err error) {
	if err := s.enter("secret"); err != nil {
		return "", false, err
	}
	defer s.mu.RUnlock()
	err = s.pool.QueryRow(ctx, `SELECT value FROM secrets WHERE name = $1`, name).Scan(&secret)
	if err == nil {
		return secret, false, nil
	} else if !errors.Is(err, pgx.ErrNoRows) {
		return "", false, translate(err, "read secret "+name)
	}
	fresh, err := create()
	if err != nil {
		return "", false, err
	}
	err = s.pool.QueryRow(ctx, `INSERT INTO secrets (name, value) VALUES ($1, $2)
		ON CONFLICT (name) DO UPDATE SET value = secrets.value RETURNING value`, name, fresh).Scan(&secret)
	if err != nil {
		return "", false, translate(err, "store secret "+name)
	}
	return secret, secret == fresh, nil
}

// Ping checks that the database answers, for health checks.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.enter("ping"); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	if err := s.pool.Ping(ctx); err != nil {
		return translate(err, "ping")
	}
	return nil
}

// Close implements store.Store (a second Close fails with ErrUnavailable): it refuses new calls, lets the appender finish what is
// queued, waits for calls in progress, ends the leads still held (see Lead) and closes the pool.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return unavailable("close")
	}
	s.closed = true
	close(s.closing)
	s.mu.Unlock()
	s.leadMu.Lock()
	leads := s.leads
	s.leads = nil
	s.leadMu.Unlock()
	for l := range leads {
		l.end(true)
	}
	s.ap.close()
	s.ap.pool.Close()
	s.pool.Close()
	return nil
}

package postgres

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley/internal/store"
)

var _ store.Leader = (*Store)(nil)

const (
	// leadPoll is how often Lead asks again for a lead another node holds.
	leadPoll = time.Second
	// leadCheck is how often a held lead's connection is pinged, and how long a ping may
	// take: a node learns within about twice this that its lead is gone.
	leadCheck = 2 * time.Second
	// leadEndTimeout bounds the unlock and close of a lead's connection.
	leadEndTimeout = 5 * time.Second
)

// Lead implements store.Leader with a session-level advisory lock, held on a connection of
// its own, opened with the pool's settings but outside the pool, so that no other call can
// run on it or release the lock: the lead lasts exactly as long as that session. Its key is
// leadKey of the schema and name, so nodes of another Parley sharing the database in a
// schema of its own do not compete with these.
//
// Lead polls pg_try_advisory_lock every leadPoll until it gets the lock or ctx ends; a
// waiting node holds no connection of the pool. Once it leads, a goroutine pings the
// connection every leadCheck and, when a ping fails (the server or the network went, or
// the session was terminated), closes the connection and lost. Between the session's end
// and that ping another node may already lead: a job run under a lead must be one that
// tolerates two runners for a few seconds (the pusher's cursors only move forward).
//
// release unlocks and closes the connection; lost is then left open. Close ends every lead
// still held, closing its lost, and makes every Lead still waiting return ErrUnavailable.
func (s *Store) Lead(ctx context.Context, name string) (lost <-chan struct{}, release func(), err error) {
	what := fmt.Sprintf("lead %q", name)
	if err := s.enter(what); err != nil {
		return nil, nil, err
	}
	s.mu.RUnlock() // Lead may wait for long: Close must not wait for it, it ends what Lead got
	conn, err := pgx.ConnectConfig(ctx, s.connCfg.Copy())
	if err != nil {
		return nil, nil, translate(err, what)
	}
	key, err := acquire(ctx, conn, name, s.closing)
	if err != nil {
		closeConn(conn)
		return nil, nil, translate(err, what)
	}
	l := &lead{s: s, conn: conn, key: key, lost: make(chan struct{}), stop: make(chan struct{})}
	s.leadMu.Lock()
	if s.leads == nil { // closed while Lead waited
		s.leadMu.Unlock()
		closeConn(conn)
		return nil, nil, unavailable(what)
	}
	s.leads[l] = struct{}{}
	s.leadMu.Unlock()
	go l.watch()
	return l.lost, func() { l.end(false) }, nil
}

// leadKey is the advisory lock key of the lead for name in schema: 64 bits of FNV-1a,
// the same on every node and every build.
func leadKey(schema, name string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(schema))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(name))
	return int64(h.Sum64())
}

// acquire takes the advisory lock of the lead for name on conn, waiting for it until ctx
// ends (its error) or closing is closed, and returns its key.
func acquire(ctx context.Context, conn *pgx.Conn, name string, closing <-chan struct{}) (int64, error) {
	var schema string
	if err := conn.QueryRow(ctx, `SELECT coalesce(current_schema(), '')`).Scan(&schema); err != nil {
		return 0, err
	}
	key := leadKey(schema, name)
	for {
		var got bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&got); err != nil {
			return 0, err
		}
		if got {
			return key, nil
		}
		wait := time.NewTimer(leadPoll)
		select {
		case <-ctx.Done():
			wait.Stop()
			return 0, ctx.Err()
		case <-closing:
			wait.Stop()
			return 0, unavailable("wait for the lead")
		case <-wait.C:
		}
	}
}

// closeConn closes a lead's connection, which ends its session and any lock it holds.
func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), leadEndTimeout)
	defer cancel()
	_ = conn.Close(ctx)
}

// lead is one lead Lead gave.
type lead struct {
	s    *Store
	key  int64
	lost chan struct{}
	stop chan struct{} // closed by end: the watcher returns

	mu    sync.Mutex // held for every use of conn, which is not safe for concurrent use
	conn  *pgx.Conn
	ended bool
}

// watch pings the lead's connection every leadCheck until the lead ends, and ends it as
// lost when a ping fails.
func (l *lead) watch() {
	tick := time.NewTicker(leadCheck)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		if !l.alive() {
			l.end(true)
			return
		}
	}
}

// alive pings the connection; an ended lead counts as alive (there is nothing to lose).
func (l *lead) alive() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), leadCheck)
	defer cancel()
	return l.conn.Ping(ctx) == nil
}

// end ends the lead, once: it stops the watcher, unlocks (unless the lead is lost, when
// the session is gone or going) and closes the connection, and, if lost, closes lost.
func (l *lead) end(lost bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return
	}
	l.ended = true
	close(l.stop)
	if !lost {
		ctx, cancel := context.WithTimeout(context.Background(), leadEndTimeout)
		_, _ = l.conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, l.key) // closing unlocks too, if this fails
		cancel()
	}
	closeConn(l.conn)
	if lost {
		close(l.lost)
	}
	l.s.leadMu.Lock()
	if l.s.leads != nil {
		delete(l.s.leads, l)
	}
	l.s.leadMu.Unlock()
}

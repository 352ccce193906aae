// Package sqlite is Parley's embedded storage backend: one SQLite database file in a data
// directory, through the pure-Go modernc.org/sqlite driver, so a single node needs no
// other service and no cgo.
//
// Writes go through group commit. One goroutine owns the only read-write connection;
// Update queues its fn, and the writer runs every queued fn (up to Options.MaxBatch) in
// one transaction, each inside its own savepoint, and commits them with a single fsync.
// Under load many sends share one disk sync instead of queueing for one each, and a
// failing fn still undoes only its own writes. Reads run on a separate pool of query-only
// connections beside the writer (WAL mode), each View on one snapshot. A third connection,
// the checkpointer, copies the write-ahead log into the database file on its own
// goroutine, so that no commit does (see checkpointer).
//
// The backend only stores rows: chat rules live in package chat.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/groupcommit"
)

// FileName is the name of the database file inside Options.Dir. SQLite keeps its
// write-ahead log beside it (FileName + "-wal", "-shm"); back up all three, or use
// SQLite's backup API.
const FileName = "parley.db"

// Options configures Open. Zero values select the defaults.
type Options struct {
	// Dir is the data directory, created (mode 0700) if missing. Required.
	Dir string
	// Relaxed trades durability for commit latency: synchronous=NORMAL instead of FULL.
	// A committed Update then survives a crash of the process but may be lost, with the
	// commits after it, on power loss or an operating-system crash. The database stays
	// consistent either way. Off by default: an acked message must survive power loss.
	Relaxed bool
	// MaxBatch caps how many Update calls share one transaction. Default 256.
	MaxBatch int
	// ReadConns is the size of the read-only connection pool. Default max(4, GOMAXPROCS).
	ReadConns int
	// BusyTimeout is how long a connection waits for a lock held by another process (a
	// backup tool, a second Open of the same directory). Default 5s.
	BusyTimeout time.Duration
	// OnCommit, if set, is called after each committed batch with the number of Update
	// calls it carried and the time from BEGIN to the end of COMMIT, for metrics. It runs
	// on the writer goroutine, so it must be quick and must not call the Store.
	OnCommit func(batch int, d time.Duration)

	// checkpointFrames and restartFrames are the checkpointer's thresholds (see
	// checkpointer); zero selects the defaults. Tests lower them.
	checkpointFrames, restartFrames int
	// onCheckpoint, if set, is called on the checkpointer's goroutine after each wake.
	onCheckpoint func(checkpointRun)
}

// withDefaults validates o and fills in its defaults.
func (o Options) withDefaults() (Options, error) {
	if o.Dir == "" {
		return o, errors.New("sqlite: Options.Dir is required")
	}
	if o.MaxBatch < 0 || o.ReadConns < 0 || o.BusyTimeout < 0 {
		return o, errors.New("sqlite: Options.MaxBatch, ReadConns and BusyTimeout must not be negative")
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = 256
	}
	if o.ReadConns == 0 {
		o.ReadConns = max(4, runtime.GOMAXPROCS(0))
	}
	if o.BusyTimeout == 0 {
		o.BusyTimeout = 5 * time.Second
	}
	if o.checkpointFrames == 0 {
		o.checkpointFrames = defaultCheckpointFrames
	}
	if o.restartFrames == 0 {
		o.restartFrames = defaultRestartFrames
	}
	return o, nil
}

// Store is the SQLite backend. It is safe for concurrent use.
type Store struct {
	w          *writer
	ckpt       *checkpointer
	q          *groupcommit.Queue
	writerDone chan struct{}

	rdb    *sql.DB
	readSt *statements
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the database in opts.Dir, brings its schema up to date,
// and starts the writer goroutine. Close releases it.
func Open(ctx context.Context, opts Options) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("sqlite: create data directory: %w", err)
	}
	path, err := filepath.Abs(filepath.Join(opts.Dir, FileName))
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	w, err := openWriter(ctx, path, opts)
	if err != nil {
		return nil, err
	}
	rdb, readSt, err := openReaders(ctx, path, opts)
	if err != nil {
		return nil, errors.Join(err, w.close())
	}
	ckpt, err := openCheckpointer(ctx, path, opts, &w.mu)
	if err != nil {
		return nil, errors.Join(err, w.close(), readSt.close(), rdb.Close())
	}
	w.wakeCheckpointer = ckpt.notify
	s := &Store{
		w:          w,
		ckpt:       ckpt,
		q:          groupcommit.NewQueue(opts.MaxBatch, unavailable("update")),
		writerDone: make(chan struct{}),
		rdb:        rdb,
		readSt:     readSt,
	}
	go func() {
		defer close(s.writerDone)
		s.q.Run(w.commit)
	}()
	return s, nil
}

// openWriter opens the single read-write connection, migrates the schema on it, and
// prepares every statement on it.
func openWriter(ctx context.Context, path string, opts Options) (*writer, error) {
	db, err := sql.Open("sqlite", dsn(path, opts,
		"cache_size(-65536)", // 64 MiB
		// Truncate the log back to 64 MiB when it starts over rather than keep its peak size.
		"journal_size_limit(67108864)",
		// No checkpoint inside COMMIT: the checkpointer does it on its own connection.
		"wal_autocheckpoint(0)"))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("sqlite: open %s: %w", path, err), db.Close())
	}
	if err := migrate(ctx, conn); err != nil {
		return nil, errors.Join(err, conn.Close(), db.Close())
	}
	st, err := prepare(ctx, conn, numStmts)
	if err != nil {
		return nil, errors.Join(err, conn.Close(), db.Close())
	}
	return &writer{db: db, conn: conn, st: st, onCommit: opts.OnCommit,
		checkpointFrames: opts.checkpointFrames}, nil
}

// openReaders opens the query-only pool and prepares the read statements on it.
func openReaders(ctx context.Context, path string, opts Options) (*sql.DB, *statements, error) {
	db, err := sql.Open("sqlite", dsn(path, opts, "query_only(1)", "cache_size(-16384)")) // 16 MiB each
	if err != nil {
		return nil, nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(opts.ReadConns)
	db.SetMaxIdleConns(opts.ReadConns)
	st, err := prepare(ctx, db, numReadStmts)
	if err != nil {
		return nil, nil, errors.Join(err, db.Close())
	}
	return db, st, nil
}

// dsn builds the driver's connection string: the pragmas every connection shares, then
// the connection's own. The path is URI-escaped because SQLite parses "file:" names as
// URIs, where '?', '#' and '%' are special.
func dsn(path string, opts Options, pragmas ...string) string {
	level := "FULL"
	if opts.Relaxed {
		level = "NORMAL"
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", opts.BusyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+level+")")
	// Savepoint sub-journals and sorts stay in memory: on disk, every page a request
	// changes inside its savepoint cost a write system call.
	q.Add("_pragma", "temp_store(MEMORY)")
	for _, p := range pragmas {
		q.Add("_pragma", p)
	}
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

// Update implements store.Store. fn runs on the writer goroutine, batched with other
// concurrent Updates; see the package comment. fn must not call Update or View on this
// Store (the writer would wait for itself). A panic in fn is re-raised in the caller.
//
// If ctx ends before the writer reaches the request, Update returns ctx.Err() and fn never
// runs; once fn has started, Update waits for the commit and reports its outcome.
func (s *Store) Update(ctx context.Context, fn func(tx store.Tx) error) error {
	return s.q.Submit(ctx, fn)
}

// AppendMessage implements store.Store: StartAppend, then Wait.
func (s *Store) AppendMessage(ctx context.Context, m store.Message) (store.Appended, error) {
	return store.StartAndWait(ctx, s, m)
}

// StartAppend implements store.Store with appendMessage in one Update: the writer
// goroutine serializes every Update, so reading max_seq and writing it back is atomic, and
// runs them in the order they were queued, which is the order of the StartAppend calls.
func (s *Store) StartAppend(ctx context.Context, m store.Message) (store.PendingAppend, error) {
	return s.q.StartAppend(ctx, false, func(tx store.Tx) (store.Appended, error) {
		w, ok := tx.(writeTx)
		if !ok {
			return store.Appended{}, fmt.Errorf("sqlite: StartAppend got a %T", tx)
		}
		return w.appendMessage(ctx, m)
	})
}

// PruneEvents implements store.Store as an Update: SQLite has one writer, which a
// retention pass shares with the sends in bounded batches (chat prunes 5,000 at a time).
func (s *Store) PruneEvents(ctx context.Context, before int64, limit int) (int, error) {
	var n int
	err := s.Update(ctx, func(tx store.Tx) error {
		w, ok := tx.(writeTx)
		if !ok {
			return fmt.Errorf("sqlite: PruneEvents got a %T", tx)
		}
		var err error
		n, err = w.pruneEvents(ctx, before, limit)
		return err
	})
	return n, err
}

// View implements store.Store. The read transaction is deferred: its snapshot is taken
// at fn's first read and holds until fn returns; fn's error is returned unchanged.
func (s *Store) View(ctx context.Context, fn func(tx store.ReadTx) error) error {
	if s.q.Closed() {
		return unavailable("view")
	}
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return translate(err, "begin view")
	}
	defer func() { _ = tx.Rollback() }() // read-only: nothing to commit
	return fn(readTx{q: view{tx: tx, st: s.readSt}})
}

// Close implements store.Store. It stops accepting Updates, lets the writer finish every
// Update already queued, then closes the connections.
func (s *Store) Close() error {
	if !s.q.Close() {
		return unavailable("close")
	}
	<-s.writerDone
	return errors.Join(s.ckpt.close(), s.w.close(), s.readSt.close(), s.rdb.Close())
}

// view is the runner of one View: the pool's prepared statements bound to its *sql.Tx.
type view struct {
	tx *sql.Tx
	st *statements
}

func (v view) stmt(ctx context.Context, id stmtID) (*sql.Stmt, error) {
	if v.st[id] == nil {
		return nil, fmt.Errorf("sqlite: statement %d is not available in a read-only transaction", id)
	}
	return v.tx.StmtContext(ctx, v.st[id]), nil
}

func (v view) exec(ctx context.Context, id stmtID, args ...any) (sql.Result, error) {
	st, err := v.stmt(ctx, id)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

func (v view) query(ctx context.Context, id stmtID, args ...any) (*sql.Rows, error) {
	st, err := v.stmt(ctx, id)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

func (v view) queryRow(ctx context.Context, id stmtID, args ...any) rowScanner {
	st, err := v.stmt(ctx, id)
	if err != nil {
		return errRow{err}
	}
	return st.QueryRowContext(ctx, args...)
}

func (v view) fail(err error, format string, args ...any) error {
	return translate(err, fmt.Sprintf(format, args...))
}

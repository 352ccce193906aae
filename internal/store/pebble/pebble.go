// Package pebble is a storage backend on Pebble, CockroachDB's Go LSM key-value engine,
// in <Dir>/pebble/. Rows and their indexes are keys (see keys.go for the layout);
// a commit is one sequential append to Pebble's write-ahead log plus one fsync, however
// many rows and indexes it touches, where a b-tree database writes every page it changed.
//
// Writes go through group commit, like the SQLite backend. One goroutine owns the write
// path; Update queues its fn, and the writer runs every queued fn (up to Options.MaxBatch)
// against one indexed batch, in which each fn reads its own writes and those of the fns
// before it, then commits the batch with a single WAL fsync and answers every caller.
// Pebble has no savepoints, so each write through a Tx first records the key's previous
// value (or its absence) in an undo log; when a fn fails or panics, its undo log is
// replayed in reverse into the batch (rewriting each previous value, deleting each key
// that was absent), after which the batch reads exactly as the previous fn left it, and
// only that caller sees the error. The commit of one batch runs on a second goroutine
// while the writer builds the next (groupcommit.RunPipelined), so that the fsync and the
// CPU work of applying requests overlap; a fn that reads the store waits for the commit
// in flight first, and AppendMessage mostly reads nothing (hot.go).
//
// Reads: a View runs on a Pebble snapshot that the writer takes after each successful
// commit returns. Pebble makes a synced batch visible to readers of the DB as soon as it
// is in the memtable, before its WAL fsync has finished; reading from the writer's
// snapshot instead means a View never sees a write that is not yet durable (which a power
// loss could then take back after a recipient was shown it), and costs a View no Pebble
// call to begin.
//
// Durability. By default an Update that returned nil is in the WAL and fsynced
// (pebble.Sync): it survives SIGKILL, an operating-system crash and power loss. With
// Options.Relaxed the batch is committed with pebble.NoSync, which in Pebble is weaker than
// SQLite's synchronous=NORMAL: the record is copied into the WAL writer's in-memory 32 KiB
// block and Commit returns; the block reaches the operating system only when it fills up,
// when a later synced write or a WAL rotation flushes it, or at Close. So a Relaxed Update
// may be lost, with the ones after it, even by a crash of the process alone (SIGKILL,
// panic, OOM kill), not only by power loss (observed: SIGKILL right after 300 acked Relaxed
// Updates lost all 300). Recovery always yields a prefix of the commits
// (each batch is one checksummed WAL record), so the store stays consistent either way.
//
// Commit failure. Pebble treats a failed WAL write or fsync as fatal (its commit
// pipeline cannot continue). The writer catches it, answers every Update of the batch with
// ErrUnavailable, and from then on the store refuses every Update and View with
// ErrUnavailable; the process must restart, and recovery replays the WAL. Fatal errors of
// Pebble's background work (flushes, compactions, MANIFEST writes) end the process with a
// panic, as Pebble's default logger would with os.Exit.
//
// Pure Go: with cgo enabled, Pebble links the DataDog/zstd C library for zstd, which this
// backend does not use (blocks are Snappy-compressed); build with CGO_ENABLED=0 or
// -tags pebblegozstd to keep the binary free of C.
//
// The backend only stores rows: chat rules live in package chat.
package pebble

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/groupcommit"
)

// DirName is the directory inside Options.Dir that holds Pebble's files. Back it up with
// the process stopped, or with Pebble's checkpoint facility.
const DirName = "pebble"

// Options configures Open. Zero values select the defaults.
type Options struct {
	// Dir is the data directory, created (mode 0700) if missing. Required.
	Dir string
	// Relaxed commits without fsync (pebble.NoSync). A returned Update may then be lost,
	// with the Updates after it, by a crash of the process as well as of the machine: see
	// the package comment. Off by default: an acked message must survive power loss.
	Relaxed bool
	// MaxBatch caps how many Update calls share one commit. Default 256.
	MaxBatch int
	// CacheSize is the size of Pebble's block cache in bytes. Default 128 MiB.
	CacheSize int64
	// Logger receives Pebble's errors (Pebble's informational messages are dropped).
	// Default slog.Default().
	Logger *slog.Logger
	// OnCommit, if set, is called after each committed batch with the number of Update
	// calls it carried and the time from the first fn to the end of the commit, for
	// metrics. It runs on the goroutine that commits, one batch at a time, so it must be
	// quick and must not call the Store.
	OnCommit func(batch int, d time.Duration)

	// fs replaces the operating system's file system, for tests that inject I/O errors.
	fs vfs.FS
	// dedupRotateAt replaces rotateAt (dedup.go), for tests of the memtable rotation.
	dedupRotateAt int
}

// withDefaults validates o and fills in its defaults.
func (o Options) withDefaults() (Options, error) {
	if o.Dir == "" {
		return o, errors.New("pebble: Options.Dir is required")
	}
	if o.MaxBatch < 0 || o.CacheSize < 0 {
		return o, errors.New("pebble: Options.MaxBatch and CacheSize must not be negative")
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = 256
	}
	if o.CacheSize == 0 {
		o.CacheSize = 128 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// pebbleOptions returns Pebble's options for this machine class (a few cores, a few GiB
// of memory, a per-process open-file limit shared with network connections).
func pebbleOptions(o Options, cache *pebble.Cache) *pebble.Options {
	po := &pebble.Options{
		Cache:  cache,
		Logger: quietLogger{o.Logger},
		// Files: sstables beyond this are reopened on demand; sockets need the rest.
		MaxOpenFiles: 1000,
		// 64 MiB memtables: flushed in the background, up to 4 queued before writes stall.
		MemTableSize:                64 << 20,
		MemTableStopWritesThreshold: 4,
		// A second compaction only when compaction debt builds up: the server needs the
		// other core.
		CompactionConcurrencyRange: func() (int, int) { return 1, 2 },
		L0CompactionThreshold:      4,
		L0StopWritesThreshold:      24,
		LBaseMaxBytes:              256 << 20,
		// Every format feature of this Pebble release that is not experimental.
		FormatMajorVersion: pebble.FormatNewest,
	}
	if o.fs != nil {
		po.FS = o.fs
	}
	for i := range po.Levels {
		// Bloom filters let the uniqueness checks of InsertMessage and CreateUser, which
		// almost always miss, skip every sstable without reading a block.
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		po.Levels[i].BlockSize = 32 << 10
	}
	return po
}

// Store is the Pebble backend. It is safe for concurrent use.
type Store struct {
	db         *pebble.DB
	w          *writer
	q          *groupcommit.Queue
	writerDone chan struct{}

	// mu guards starting a View against Close: Views hold it shared.
	mu     sync.RWMutex
	closed atomic.Bool // set once, under mu
	views  sync.WaitGroup

	// failed is set once a commit failed: Pebble's commit pipeline is then unusable.
	failed atomic.Pointer[error]

	pruneMu sync.Mutex // one retention pass at a time

	// rs guards cur, the snapshot of the last durable commit, which Views read.
	rs  sync.Mutex
	cur *readState
}

var _ store.Store = (*Store)(nil)

// readState is a reference-counted snapshot. The Store holds one reference to cur; each
// View holds one while it runs; the last release closes the snapshot.
type readState struct {
	snap *pebble.Snapshot
	refs atomic.Int32
}

func (r *readState) release() {
	if r.refs.Add(-1) == 0 {
		_ = r.snap.Close()
	}
}

// Open opens (creating if needed) the database in opts.Dir and starts the writer
// goroutine. Close releases it. Pebble locks the directory: a second Open of the same Dir,
// in this process or another, fails.
func Open(ctx context.Context, opts Options) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(filepath.Join(opts.Dir, DirName))
	if err != nil {
		return nil, fmt.Errorf("pebble: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pebble: create data directory: %w", err)
	}
	cache := pebble.NewCache(opts.CacheSize)
	db, err := openDB(dir, pebbleOptions(opts, cache))
	cache.Unref() // the DB holds its own reference
	if err != nil {
		return nil, fmt.Errorf("pebble: open %s: %w", dir, err)
	}
	if err := checkVersion(db); err != nil {
		return nil, errors.Join(err, db.Close())
	}
	// What the WAL replay put in the memtables goes to sstables, where AppendMessage's
	// dedup check looks for keys the writer did not write itself (dedup.go).
	if err := db.Flush(); err != nil {
		return nil, errors.Join(fmt.Errorf("pebble: flush after recovery: %w", err), db.Close())
	}
	lastMark, err := (&txn{r: db}).lastMark()
	if err != nil {
		return nil, errors.Join(err, db.Close())
	}
	sync := pebble.Sync
	if opts.Relaxed {
		sync = pebble.NoSync
	}
	s := &Store{
		db:         db,
		q:          groupcommit.NewQueue(opts.MaxBatch, unavailable("update")),
		writerDone: make(chan struct{}),
	}
	s.cur = s.newReadState()
	s.w = &writer{
		db: db, sync: sync, onCommit: opts.OnCommit,
		publish: s.publish, failed: &s.failed, hot: newHotState(opts.dedupRotateAt),
		lastMark: lastMark,
	}
	go func() {
		defer close(s.writerDone)
		s.q.RunPipelined(s.w)
	}()
	return s, nil
}

// openDB opens Pebble, turning a fatal error during recovery (our logger panics where
// Pebble's own would exit) into an error.
func openDB(dir string, po *pebble.Options) (db *pebble.DB, err error) {
	defer func() {
		if v := recover(); v != nil {
			if fe, ok := v.(fatalError); ok {
				err = fe
				return
			}
			panic(v)
		}
	}()
	return pebble.Open(dir, po)
}

// checkVersion records the layout version in a new database and refuses a database
// written by a newer layout.
func checkVersion(db *pebble.DB) error {
	v, closer, err := db.Get(versionKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		buf := appendVarint(nil, layoutVersion)
		if err := db.Set(versionKey, buf, pebble.Sync); err != nil {
			return fmt.Errorf("pebble: record layout version: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("pebble: read layout version: %w", err)
	}
	d := decoder{b: v}
	got := d.varint()
	err = errors.Join(d.done(), closer.Close())
	switch {
	case err != nil:
		return fmt.Errorf("pebble: read layout version: %w", err)
	case got > layoutVersion:
		return fmt.Errorf("pebble: database layout version %d is newer than this binary's %d", got, layoutVersion)
	case got < 2:
		return upgradeLayout(db)
	}
	return nil
}

// upgradeLayout brings a layout 1 database to layout 2: it writes the standing index o of
// every member row, and the new version, in one synced batch, so that a crash leaves
// either layout, whole.
func upgradeLayout(db *pebble.DB) error {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{tMember}, UpperBound: []byte{tMember + 1}})
	if err != nil {
		return fmt.Errorf("pebble: upgrade to layout 2: %w", err)
	}
	b := db.NewBatch()
	defer b.Close()
	var key []byte
	for valid := it.First(); valid; valid = it.Next() {
		conv, rest, err := readStr(it.Key()[1:])
		if err == nil {
			var user string
			if user, _, err = readStr(rest); err == nil {
				var m store.Member
				if m, err = decodeMember(it.Value(), conv, user); err == nil {
					key = standingKey(key[:0], conv, m.Ordinal, user)
					err = b.Set(key, nil, nil)
				}
			}
		}
		if err != nil {
			return errors.Join(fmt.Errorf("pebble: upgrade to layout 2: member row %q: %w", it.Key(), err), it.Close())
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("pebble: upgrade to layout 2: %w", err)
	}
	if err := b.Set(versionKey, appendVarint(nil, layoutVersion), nil); err != nil {
		return fmt.Errorf("pebble: upgrade to layout 2: %w", err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("pebble: upgrade to layout 2: %w", err)
	}
	return nil
}

// newReadState takes a snapshot of everything committed so far.
func (s *Store) newReadState() *readState {
	r := &readState{snap: s.db.NewSnapshot()}
	r.refs.Store(1)
	return r
}

// publish makes the state after the commit that just returned the one Views read. It
// runs on the writer goroutine before the batch's callers are answered, so a View started
// after an Update returned sees it.
func (s *Store) publish() {
	next := s.newReadState()
	s.rs.Lock()
	prev := s.cur
	s.cur = next
	s.rs.Unlock()
	prev.release()
}

// Update implements store.Store. fn runs on the writer goroutine, batched with other
// concurrent Updates; see the package comment. fn must not call Update or View on this
// Store (the writer would wait for itself). A panic in fn is re-raised in the caller.
//
// If ctx ends before the writer reaches the request, Update returns ctx.Err() and fn never
// runs; once fn has started, Update waits for the commit and reports its outcome.
func (s *Store) Update(ctx context.Context, fn func(tx store.Tx) error) error {
	if err := s.failedErr(); err != nil {
		return err
	}
	return s.q.Submit(ctx, fn)
}

// failedErr returns the commit failure that made the store unusable, if any.
func (s *Store) failedErr() error {
	if p := s.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// View implements store.Store. fn reads the snapshot of the last commit that returned
// before View was called; fn's error is returned unchanged.
func (s *Store) View(ctx context.Context, fn func(tx store.ReadTx) error) error {
	if err := s.failedErr(); err != nil {
		return err
	}
	if !s.enter() {
		return unavailable("view")
	}
	defer s.views.Done()

	s.rs.Lock()
	r := s.cur
	r.refs.Add(1) // the Store's own reference keeps it above zero here
	s.rs.Unlock()
	defer r.release()

	t := &txn{r: r.snap}
	defer t.ended.Store(true)
	return fn(readTx{t})
}

// PruneEvents implements store.Store beside the writer, on a batch of its own: it deletes
// only events older than the bound, which no append writes again, raises Pruned in the same
// batch, and removes hour hints of hours past the bound. The writer's hot state holds
// neither (a user's last cursor does not change when old events go), and the writer reads a
// user's cursors in an order that a retention batch landing between its reads cannot fool
// (txn.cursors). The batch is committed without an fsync of its own: the next synced commit
// takes it to disk, and a crash before that only brings old events back for the next pass.
func (s *Store) PruneEvents(ctx context.Context, before int64, limit int) (int, error) {
	if err := s.failedErr(); err != nil {
		return 0, err
	}
	if !s.enter() {
		return 0, unavailable("prune events")
	}
	defer s.views.Done()
	s.pruneMu.Lock()
	defer s.pruneMu.Unlock()
	b := s.db.NewIndexedBatch()
	t := &txn{r: b, b: b, undo: &undoLog{}}
	n, err := writeTx{readTx{t}}.pruneEvents(ctx, before, limit)
	t.ended.Store(true)
	if err != nil || b.Empty() {
		_ = b.Close()
		return 0, err
	}
	if err := commitBatch(b, pebble.NoSync); err != nil {
		s.failed.Store(&err) // Pebble's commit pipeline is unusable after a failed commit
		return 0, err
	}
	_ = b.Close()
	// Views read the snapshot the writer publishes after a commit, which it alone may take
	// (a snapshot taken here could hold a batch of the writer's that is not yet synced):
	// have the writer publish one that holds these removals before returning.
	err = s.Update(ctx, func(store.Tx) error {
		s.w.republish = true
		return nil
	})
	return n, err
}

// enter registers a reader of the database, which Close waits for; false once closed.
// A true return must be paired with s.views.Done().
func (s *Store) enter() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return false
	}
	s.views.Add(1)
	return true
}

// Close implements store.Store. It stops accepting Updates and Views, lets the writer
// finish every Update already queued, waits for running Views, then closes Pebble. After a
// commit failure it does not close Pebble, whose commit pipeline is then stuck; the process
// is expected to exit.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		return unavailable("close")
	}
	s.closed.Store(true)
	s.q.Close()
	s.mu.Unlock()
	<-s.writerDone
	s.views.Wait()
	if err := s.failedErr(); err != nil {
		return err
	}
	s.cur.release()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("pebble: close: %w", err)
	}
	return nil
}

// unavailable is the error of a call on a closed store.
func unavailable(what string) error {
	return fmt.Errorf("pebble: %s: store closed: %w", what, store.ErrUnavailable)
}

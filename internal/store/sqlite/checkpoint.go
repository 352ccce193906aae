package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Checkpoint thresholds, in WAL frames (one changed page each, 4 KiB by default).
const (
	// defaultCheckpointFrames is how many frames the writer appends before it wakes the
	// checkpointer: SQLite's own auto-checkpoint threshold.
	defaultCheckpointFrames = 1000
	// defaultRestartFrames bounds the WAL: 16,384 frames of 4 KiB are the 64 MiB that
	// journal_size_limit truncates the log back to.
	defaultRestartFrames = 16384
)

// restartWait is how long a RESTART checkpoint, with the writer paused, waits for readers
// of the old log (the checkpointer connection's busy_timeout, in place of
// Options.BusyTimeout). A reader that holds its snapshot longer stalls no write: the
// RESTART gives up, the writer resumes, and the next wake tries again.
const restartWait = 100 * time.Millisecond

// checkpointer copies the WAL back into the database file on its own connection and
// goroutine. SQLite's automatic checkpoint would do it inside the writer's COMMIT, where
// every caller of the batch, and every batch queued behind it, waits for the copy and its
// fsync; here the writer only appends, with wal_autocheckpoint=0, and wakes the
// checkpointer after every checkpointFrames frames.
//
// A PASSIVE checkpoint runs beside the writer and the readers and never waits for them.
// But SQLite starts the log over only at a write transaction that began with the log
// wholly copied, and a writer that never pauses always began its batch before the copy
// ended: the log would grow without end. So once a checkpoint finds restartFrames frames
// or more in the log, the checkpointer pauses the writer between batches (writerMu) and
// runs a RESTART checkpoint, which copies the rest and waits (restartWait at most) for
// readers of the old log; the next commit then starts the log over (and
// journal_size_limit truncates its file).
// Left to SQLite's lock alone, the RESTART would poll for the write lock with sleeps and
// lose the race to the writer, which takes it again at once.
type checkpointer struct {
	db            *sql.DB
	writerMu      *sync.Mutex   // the writer holds it for each batch; see writer.mu
	wake          chan struct{} // capacity 1: a wake sent during a checkpoint is kept, more are merged
	done          chan struct{} // closed when run returns
	restartFrames int
	restartAt     int // the log's size in frames that calls for the next RESTART
	onCheckpoint  func(checkpointRun)
}

// checkpointRun describes one background checkpoint, for Options.onCheckpoint.
type checkpointRun struct {
	Restart bool          // a RESTART checkpoint, run because the WAL reached its bound
	Busy    bool          // it could not finish: a reader or another process held the log
	Frames  int           // frames in the WAL when it ran
	Copied  int           // frames of them that are now in the database file
	Took    time.Duration // how long it ran
	Err     error         // why it failed, if it did; the next wake tries again
}

// openCheckpointer opens the checkpointer's connection and starts its goroutine.
func openCheckpointer(ctx context.Context, path string, opts Options, writerMu *sync.Mutex) (*checkpointer, error) {
	own := opts
	own.BusyTimeout = restartWait
	db, err := sql.Open("sqlite", dsn(path, own, "cache_size(-2048)"))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	if err := db.PingContext(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("sqlite: open checkpointer: %w", err), db.Close())
	}
	c := &checkpointer{
		db:            db,
		writerMu:      writerMu,
		wake:          make(chan struct{}, 1),
		done:          make(chan struct{}),
		restartFrames: opts.restartFrames,
		restartAt:     opts.restartFrames,
		onCheckpoint:  opts.onCheckpoint,
	}
	go c.run()
	return c, nil
}

// notify wakes the checkpointer without waiting for it. Called by the writer goroutine.
func (c *checkpointer) notify() {
	select {
	case c.wake <- struct{}{}:
	default: // a wake is pending already
	}
}

// run checkpoints once per wake until close.
func (c *checkpointer) run() {
	defer close(c.done)
	for range c.wake {
		cp := c.checkpoint("PASSIVE")
		if cp.Err == nil && cp.Frames >= c.restartAt {
			cp = c.restart()
		}
		if c.onCheckpoint != nil {
			c.onCheckpoint(cp)
		}
	}
}

// restart runs a RESTART checkpoint with the writer paused between batches. If a reader
// made it give up, the next try waits for restartFrames more frames, so that a reader
// holding its snapshot for long pauses the writer once per restartFrames frames, not at
// every wake.
func (c *checkpointer) restart() checkpointRun {
	c.writerMu.Lock()
	cp := c.checkpoint("RESTART")
	c.writerMu.Unlock()
	c.restartAt = c.restartFrames
	if cp.Busy || cp.Err != nil {
		c.restartAt = cp.Frames + c.restartFrames
	}
	return cp
}

// checkpoint runs one wal_checkpoint in mode and reports it.
func (c *checkpointer) checkpoint(mode string) checkpointRun {
	cp := checkpointRun{Restart: mode == "RESTART"}
	start := time.Now()
	err := c.db.QueryRow("PRAGMA wal_checkpoint("+mode+")").Scan(&cp.Busy, &cp.Frames, &cp.Copied)
	cp.Took = time.Since(start)
	if err != nil {
		cp.Err = translate(err, "checkpoint")
	}
	return cp
}

// close stops the goroutine, after the checkpoint in progress, and closes the connection.
// The writer must have stopped: its notify would send on a closed channel.
func (c *checkpointer) close() error {
	close(c.wake)
	<-c.done
	return c.db.Close()
}

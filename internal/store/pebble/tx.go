package pebble

import (
	"context"
	"io"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"

	"github.com/parleychat/parley/internal/store"
)

// reader is what both an indexed batch (the writer) and a snapshot (a View) offer.
type reader interface {
	Get(key []byte) ([]byte, io.Closer, error)
	NewIter(o *pebble.IterOptions) (*pebble.Iterator, error)
}

// txnBufs are scratch buffers: keys being built, the last value read, a value being
// encoded. The writer hands them from one request to the next.
type txnBufs struct {
	key, val, enc []byte
}

// txn is one transaction: a View on a snapshot (b == nil), or one request of a group
// commit on the shared indexed batch.
type txn struct {
	r    reader
	b    *pebble.Batch // nil in a View
	undo *undoLog
	hot  *hotState // the writer's, nil in a View: writes keep it right
	txnBufs
	ended atomic.Bool // set when fn has returned: a kept tx must not touch later batches

	// conv caches the conversation row this transaction last read or wrote, so that the
	// read-modify-write of a send (Conversation, then UpdateConversation) reads it once.
	// Only this transaction's conversation methods write conversation keys while it runs.
	conv struct {
		id    string
		val   []byte
		valid bool
	}
}

// cacheConv remembers the conversation row id=val.
func (t *txn) cacheConv(id string, val []byte) {
	t.conv.id, t.conv.val, t.conv.valid = id, append(t.conv.val[:0], val...), true
}

// readTx implements store.ReadTx on a txn.
type readTx struct{ t *txn }

// writeTx implements store.Tx on a txn.
type writeTx struct{ readTx }

var (
	_ store.ReadTx = readTx{}
	_ store.Tx     = writeTx{}
)

// check refuses work once fn has returned or its ctx is done.
func (t *txn) check(ctx context.Context) error {
	if t.ended.Load() {
		return errTxDone
	}
	return ctx.Err()
}

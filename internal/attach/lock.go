package attach

import (
	"context"
	"sync"

	tushandler "github.com/tus/tusd/v2/pkg/handler"
	"github.com/tus/tusd/v2/pkg/memorylocker"
)

// handoverLocker is tusd's memory locker with one ordering added: a request that wants an
// upload's lock (a HEAD or a resumed PATCH while an earlier PATCH still holds it) asks the
// holder to let go only once the holder's PATCH has handed its body to the store, or never
// if it lets go first.
//
// tusd answers such a request by cancelling the holder's request, and a goroutine it starts
// then reads the holder's body field; the holder's PATCH sets that field just before it
// calls WriteChunk, with nothing ordering the two. Holding the request back until
// WriteChunk has begun orders them (the field is set, then WriteChunk tells us, then the
// holder is cancelled), so a client that resumes after a dropped connection still takes the
// upload over at once instead of waiting for the old connection's read timeout.
type handoverLocker struct {
	inner *memorylocker.MemoryLocker

	mu   sync.Mutex
	held map[string]*handoverLock // upload id → the lock that holds it
}

func newHandoverLocker() *handoverLocker {
	return &handoverLocker{inner: memorylocker.New(), held: make(map[string]*handoverLock)}
}

// UseIn installs the locker in composer.
func (l *handoverLocker) UseIn(composer *tushandler.StoreComposer) { composer.UseLocker(l) }

// NewLock implements tushandler.Locker.
func (l *handoverLocker) NewLock(id string) (tushandler.Lock, error) {
	inner, err := l.inner.NewLock(id)
	if err != nil {
		return nil, err
	}
	return &handoverLock{locker: l, id: id, inner: inner}, nil
}

// writing is called by the store as a WriteChunk of upload id begins: from then on the
// holder's body is in place, and a release asked for meanwhile is passed on.
func (l *handoverLocker) writing(id string) {
	l.mu.Lock()
	h := l.held[id]
	l.mu.Unlock()
	if h != nil {
		h.writing()
	}
}

type handoverLock struct {
	locker *handoverLocker
	id     string
	inner  tushandler.Lock

	mu      sync.Mutex
	release func() // tusd's request to let go; nil until the lock is taken
	body    bool   // WriteChunk has begun: release may be called
	asked   bool   // a release was asked for before WriteChunk began
}

// Lock implements tushandler.Lock.
func (h *handoverLock) Lock(ctx context.Context, requestRelease func()) error {
	h.mu.Lock()
	h.release = requestRelease
	h.mu.Unlock()
	if err := h.inner.Lock(ctx, h.requestRelease); err != nil {
		return err
	}
	h.locker.mu.Lock()
	h.locker.held[h.id] = h
	h.locker.mu.Unlock()
	return nil
}

// requestRelease is what the inner locker calls when another request wants the lock.
func (h *handoverLock) requestRelease() {
	h.mu.Lock()
	release, body := h.release, h.body
	if !body {
		h.asked = true
	}
	h.mu.Unlock()
	if body {
		release()
	}
}

func (h *handoverLock) writing() {
	h.mu.Lock()
	h.body = true
	release, asked := h.release, h.asked
	h.mu.Unlock()
	if asked {
		release()
	}
}

// Unlock implements tushandler.Lock.
func (h *handoverLock) Unlock() error {
	h.locker.mu.Lock()
	if h.locker.held[h.id] == h {
		delete(h.locker.held, h.id)
	}
	h.locker.mu.Unlock()
	return h.inner.Unlock()
}

package gateway

import (
	"net"
	"sync"
)

// corkConn is the network connection under a WebSocket: while held, the frames written to it
// (each whole, under gorilla's write lock) collect in memory, and flush sends them with one
// write. The connection's writer holds it while it writes every frame that is already
// waiting (a reply and the event of the same send, or a burst of a busy group's events), and
// while it pushes a page of a catch-up, so that they cost one system call instead of one
// each, and the client one read and wake-up. Unheld, a write goes straight through, as for
// any other connection.
//
// Only the writer holds and flushes, and only around writes it is making, so that nothing
// written meanwhile by another goroutine (gorilla's pong and close answers, from the reader)
// waits longer than the writer takes to encode what it holds.
type corkConn struct {
	net.Conn

	mu   sync.Mutex // guards held and buf; taken by every Write
	held bool
	buf  *[]byte // from corkBuffers while held frames wait; nil otherwise
}

// maxCorked bounds what a held connection collects: a write that would take it further sends
// what was collected first (a catch-up writes megabytes), so a page of small events goes out
// in a few writes of a size a socket buffer takes at once.
const maxCorked = 64 << 10

// corkBuffers recycles the buffers frames collect in: a connection keeps none between
// flushes, so the many idle ones hold no memory for it.
var corkBuffers = sync.Pool{New: func() any { b := make([]byte, 0, maxCorked); return &b }}

// Write implements net.Conn: it writes p, or collects it while the connection is held.
func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.held {
		return c.Conn.Write(p)
	}
	if c.buf != nil && len(*c.buf)+len(p) > maxCorked {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
	}
	if len(p) > maxCorked {
		return c.Conn.Write(p) // nothing is collected now: the order holds
	}
	if c.buf == nil {
		c.buf = corkBuffers.Get().(*[]byte)
	}
	*c.buf = append(*c.buf, p...)
	return len(p), nil
}

// hold makes later writes collect until flush.
func (c *corkConn) hold() {
	c.mu.Lock()
	c.held = true
	c.mu.Unlock()
}

// flush sends what was collected, under the write deadline of the last frame written
// (gorilla sets it before each), and stops holding.
func (c *corkConn) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held = false
	return c.flushLocked()
}

// flushLocked sends what was collected and gives the buffer back. Lock c.mu first.
func (c *corkConn) flushLocked() error {
	b := c.buf
	if b == nil {
		return nil
	}
	c.buf = nil
	_, err := c.Conn.Write(*b)
	*b = (*b)[:0]
	corkBuffers.Put(b)
	return err
}

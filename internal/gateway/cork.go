package gateway

import (
	"net"
	"sync"
	"syscall"
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
//
// Reads, too, go through a buffer that the connection holds only while it has data in it:
// Read waits for data holding none (syscall.RawConn), then reads what has arrived, up to
// 4 KiB, into a pooled one (cork_unix.go). gorilla's own read buffer is then only as large as
// a control frame needs (newUpgrader): idle, a connection holds 128 bytes of read buffer
// instead of 1 KiB, and busy, it reads up to 4 KiB of frames per system call instead of 1 KiB.
type corkConn struct {
	net.Conn

	mu   sync.Mutex // guards held and buf; taken by every Write
	held bool
	buf  *[]byte // from corkBuffers while held frames wait; nil otherwise

	// The read side, used by the connection's one reader only.
	raw     syscall.RawConn       // the socket's; nil when it has none (Read then reads through)
	rbuf    *[]byte               // from readBuffers while read data waits in it; nil otherwise
	roff    int                   // where the data waiting in *rbuf starts
	rerr    error                 // the error of readRaw's last read
	readRaw func(fd uintptr) bool // fill's function for raw.Read, made once rather than per read
}

// newCorkConn returns c, the network connection of a WebSocket, as a corkConn.
func newCorkConn(c net.Conn) *corkConn {
	return &corkConn{Conn: c, raw: rawConnOf(c)}
}

// readChunk is the most a read into a pooled buffer takes at once, and the size from which a
// Read goes straight into the caller's buffer.
const readChunk = 4 << 10

// readBuffers recycles the buffers reads land in: a connection keeps none while it waits for
// data, so the many idle ones hold no memory for it.
var readBuffers = sync.Pool{New: func() any { b := make([]byte, readChunk); return &b }}

// Read implements net.Conn: it returns data already read, or waits for more, holding no
// buffer while it waits (fill) unless p is large enough to read into directly.
func (c *corkConn) Read(p []byte) (int, error) {
	if c.rbuf == nil {
		if c.raw == nil || len(p) >= readChunk {
			return c.Conn.Read(p)
		}
		if err := c.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, (*c.rbuf)[c.roff:])
	c.roff += n
	if c.roff == len(*c.rbuf) {
		readBuffers.Put(c.rbuf)
		c.rbuf, c.roff = nil, 0
	}
	return n, nil
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

package gateway

import (
	"bytes"
	"errors"
	"io"
	"net"
	"slices"
	"testing"
	"time"
)

// writesConn records each Write it is given.
type writesConn struct {
	net.Conn
	writes [][]byte
}

func (c *writesConn) Write(p []byte) (int, error) {
	c.writes = append(c.writes, bytes.Clone(p))
	return len(p), nil
}

func TestCorkConn(t *testing.T) {
	frame := func(c byte, n int) []byte { return bytes.Repeat([]byte{c}, n) }
	tests := []struct {
		name   string
		frames [][]byte
		held   bool
		want   []int // the sizes of the writes the network connection sees
	}{
		{"unheld writes go through", [][]byte{frame('a', 10), frame('b', 20)}, false, []int{10, 20}},
		{"held writes go out together", [][]byte{frame('a', 10), frame('b', 20), frame('c', 30)}, true, []int{60}},
		{"a write that would pass the bound sends what was collected first",
			[][]byte{frame('a', maxCorked-10), frame('b', 20), frame('c', 5)}, true, []int{maxCorked - 10, 25}},
		{"a frame larger than the bound goes straight through, in order",
			[][]byte{frame('a', 10), frame('b', maxCorked+1), frame('c', 5)}, true, []int{10, maxCorked + 1, 5}},
		{"nothing held, nothing written", nil, true, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := &writesConn{}
			c := &corkConn{Conn: w}
			if tc.held {
				c.hold()
			}
			var all []byte
			for _, f := range tc.frames {
				if n, err := c.Write(f); n != len(f) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
				all = append(all, f...)
			}
			if err := c.flush(); err != nil {
				t.Fatal(err)
			}
			var sizes []int
			for _, b := range w.writes {
				sizes = append(sizes, len(b))
			}
			if !slices.Equal(sizes, tc.want) {
				t.Errorf("writes of %v bytes, want %v", sizes, tc.want)
			}
			if got := bytes.Join(w.writes, nil); !bytes.Equal(got, all) {
				t.Error("the bytes written differ from the frames, or their order")
			}
			if c.held || c.buf != nil {
				t.Errorf("after flush: held %v, buffer kept %v", c.held, c.buf != nil)
			}
			if _, err := c.Write(frame('z', 1)); err != nil || len(w.writes) != len(tc.want)+1 {
				t.Error("a write after flush was not sent at once")
			}
		})
	}
}

// tcpPair returns the two ends of a loopback TCP connection, the accepted one as a corkConn.
func tcpPair(t *testing.T) (client net.Conn, server *corkConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return client, newCorkConn(c)
}

// TestCorkConnRead: reads smaller than readChunk go through a pooled buffer that is held only
// while data waits in it; larger ones go straight through; deadlines and EOF are reported
// as net.Conn reports them.
func TestCorkConnRead(t *testing.T) {
	client, c := tcpPair(t)
	if c.raw == nil {
		t.Skip("no RawConn on this platform: reads go straight through")
	}
	data := bytes.Repeat([]byte("0123456789"), 1000) // 10,000 bytes: more than one chunk
	if _, err := client.Write(data); err != nil {
		t.Fatal(err)
	}
	var got []byte
	p := make([]byte, 128) // gorilla's read buffer
	for len(got) < 2*readChunk {
		n, err := c.Read(p)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p[:n]...)
	}
	big := make([]byte, readChunk) // large enough to be read into directly
	for len(got) < len(data) {
		n, err := c.Read(big)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, big[:n]...)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("the bytes read differ from those written")
	}
	if c.rbuf != nil {
		t.Fatal("a read buffer is kept with nothing in it")
	}

	_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	var ne net.Error
	if _, err := c.Read(p); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read past the deadline: %v, want a timeout", err)
	}
	if c.rbuf != nil {
		t.Fatal("a read buffer is kept while waiting")
	}
	_ = c.SetReadDeadline(time.Time{})
	client.Close()
	if _, err := c.Read(p); err != io.EOF {
		t.Fatalf("Read after the peer closed: %v, want EOF", err)
	}
}

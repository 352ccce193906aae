package gateway

import (
	"bytes"
	"net"
	"slices"
	"testing"
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

package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/hub"
	"github.com/parleychat/parley/protocol"
)

// BenchmarkWSFanout publishes one event to each of fanoutConns users, each with a WebSocket
// open, and waits until every client has read its push: the cost of a fanout to online
// members past the hub, mostly each connection's writer waking up, writing and going idle
// again, and the clients' reads (in this process too). ns/delivery is per connection.
func BenchmarkWSFanout(b *testing.B) {
	const fanoutConns = 100
	ts := newTestServer(b, func(c *Config) { c.SendRate, c.RequestRate, c.FanoutRate = 0, 0, 0 })
	ctx := context.Background()
	users := make([]string, fanoutConns)
	cursors := make([]int64, fanoutConns)
	var received, want atomic.Int64
	all := make(chan struct{}, 1)
	for i := range users {
		users[i] = fmt.Sprintf("member%d", i)
		c := ts.dialBare(ts.user(users[i], "phone"))
		b.Cleanup(func() { c.Close() })
		var err error
		if cursors[i], err = ts.svc.LatestCursor(ctx, users[i]); err != nil {
			b.Fatal(err)
		}
		go countPushes(c, func() {
			if received.Add(1) == want.Load() {
				all <- struct{}{}
			}
		})
	}
	waitFor(b, func() bool { return testutilGauge(ts, "parley_ws_connections") == fanoutConns })
	data, _ := json.Marshal(map[string]any{"seq": 1, "sender_id": "member0", "content": "hello"})
	b.ResetTimer()
	for i := range b.N {
		body := &hub.Body{Type: protocol.EventMessage, ConvID: "g1", TS: time.Now().UnixMilli(), Data: data}
		want.Store(int64((i + 1) * fanoutConns))
		for j, u := range users {
			cursors[j]++
			ts.svc.Hub().Publish(u, []hub.Event{{Cursor: cursors[j], Body: body}})
		}
		select {
		case <-all:
		case <-time.After(10 * time.Second):
			b.Fatalf("fanout %d: %d of %d pushes read after 10 s", i, received.Load(), want.Load())
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*fanoutConns), "ns/delivery")
}

// countPushes reads a server's frames from c until it fails, calling pushed for each data
// frame (control frames, such as pings, are skipped).
func countPushes(c net.Conn, pushed func()) {
	r := bufio.NewReader(c)
	for {
		var h [2]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return
		}
		n := int64(h[1] & 0x7f)
		switch n {
		case 126, 127:
			ext := make([]byte, map[int64]int{126: 2, 127: 8}[n])
			if _, err := io.ReadFull(r, ext); err != nil {
				return
			}
			n = 0
			for _, x := range ext {
				n = n<<8 | int64(x)
			}
		}
		if _, err := r.Discard(int(n)); err != nil {
			return
		}
		if h[0]&0x08 == 0 { // not a control frame
			pushed()
		}
	}
}

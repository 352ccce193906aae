package client

import (
	"encoding/json"
	"testing"
)

// Frames as a Parley server writes them for a direct message of the load tool's default size
// (`parley bench direct`: 64 content bytes). Every sent message costs the sender one send
// frame and one reply, and each of its online recipients (the sender's own device included)
// one push: these benchmarks are the SDK's share of the load generator's CPU per message.
const (
	benchConv    = "d_y5zvysbda7fsb4r2wrxjgu6cte"
	benchContent = `{"t":1796143125884602770,"text":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`
	benchAck     = `{"id":"r1","code":0,"conv_id":"d_y5zvysbda7fsb4r2wrxjgu6cte","client_msg_id":"6eed4583-dddf-4094-8762-b797ff5895c9","msg_id":"m_kdjnrolfoqbolrqvkom7cxrgqm","seq":1,"created_at":1796143125885,"duplicate":false}`
	benchPush    = `{"op":"event","event":{"cursor":2,"type":"message","conv_id":"d_y5zvysbda7fsb4r2wrxjgu6cte","ts":1796143125885,"data":{"conv_id":"d_y5zvysbda7fsb4r2wrxjgu6cte","seq":1,"msg_id":"m_kdjnrolfoqbolrqvkom7cxrgqm","client_msg_id":"6eed4583-dddf-4094-8762-b797ff5895c9","sender_id":"bench-r1-a000001","content_type":1,"content":{"t":1796143125884602770,"text":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxx"},"extra":null,"created_at":1796143125885,"recalled":false}}}`
)

// benchConn is a connection with no socket: enough to route frames through handle.
func benchConn() *wsConn {
	c := New(Options{BaseURL: "http://127.0.0.1:1"})
	return &wsConn{c: c, pending: make(map[string]chan []byte), done: make(chan struct{})}
}

// BenchmarkSendFrame is the encoding of one send: what SendWithID does once per message and
// each WebSocket attempt does to build its frame.
func BenchmarkSendFrame(b *testing.B) {
	content := json.RawMessage(benchContent)
	b.ReportAllocs()
	for b.Loop() {
		m, err := newOutgoing(NewClientMsgID(), benchConv, ContentText, content, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := m.frame("r1"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReplyFrame is the routing of a send's reply by the reader to the waiting request,
// and its decoding into the ack.
func BenchmarkReplyFrame(b *testing.B) {
	cn := benchConn()
	data := []byte(benchAck)
	b.ReportAllocs()
	for b.Loop() {
		ch := make(chan []byte, 1)
		cn.mu.Lock()
		cn.pending["r1"] = ch
		cn.mu.Unlock()
		cn.handle(data)
		var ack MessageAck
		if err := decodeReply(<-ch, &ack); err != nil || ack.Seq != 1 {
			b.Fatal(err, ack)
		}
	}
}

// BenchmarkPushFrame is the decoding of one event push by the reader, up to the event queue.
func BenchmarkPushFrame(b *testing.B) {
	cn := benchConn()
	data := []byte(benchPush)
	b.ReportAllocs()
	for b.Loop() {
		cn.handle(data)
		if ev := <-cn.c.events; ev.Cursor != 2 {
			b.Fatal(ev)
		}
	}
}

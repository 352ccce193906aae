package client

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// Frames as a Parley server writes them for a direct message of the load tool's default size
// (`parley-bench direct`: 64 content bytes). Every sent message costs the sender one send
// frame and one reply, and each of its online recipients (the sender's own device included)
// one push: these benchmarks are the SDK's share of the load generator's CPU per message.
const (
	benchConv    = "d_y5zvysbda7fsb4r2wrxjgu6cte"
	benchContent = `{"t":1796143125884602770,"text":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`
	benchAck     = `{"id":"r1","code":0,"conv_id":"d_y5zvysbda7fsb4r2wrxjgu6cte","client_msg_id":"6eed4583-dddf-4094-8762-b797ff5895c9","msg_id":"m_kdjnrolfoqbolrqvkom7cxrgqm","seq":1,"created_at":1796143125885,"duplicate":false}`
	benchPush    = `{"op":"event","event":{"cursor":2,"type":"message","conv_id":"d_y5zvysbda7fsb4r2wrxjgu6cte","ts":1796143125885,"data":{"conv_id":"d_y5zvysbda7fsb4r2wrxjgu6cte","seq":1,"msg_id":"m_kdjnrolfoqbolrqvkom7cxrgqm","client_msg_id":"6eed4583-dddf-4094-8762-b797ff5895c9","sender_id":"bench-r1-a000001","content_type":1,"content":{"t":1796143125884602770,"text":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxx"},"extra":null,"created_at":1796143125885,"recalled":false}}}`
)

// bareConn is a connection with no socket: enough to route frames through handle.
func bareConn() *wsConn {
	c := New(Options{BaseURL: "http://127.0.0.1:1"})
	return &wsConn{c: c, pending: make(map[string]chan reply), done: make(chan struct{})}
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
	cn := bareConn()
	data := []byte(benchAck)
	b.ReportAllocs()
	for b.Loop() {
		ch := make(chan reply, 1)
		cn.mu.Lock()
		cn.pending["r1"] = ch
		cn.mu.Unlock()
		cn.handle(data)
		var ack MessageAck
		if err := (<-ch).decode(&ack); err != nil || ack.Seq != 1 {
			b.Fatal(err, ack)
		}
	}
}

// BenchmarkPushFrame is the decoding of one event push by the reader, up to the event queue.
func BenchmarkPushFrame(b *testing.B) {
	cn := bareConn()
	data := []byte(benchPush)
	var batch []SyncEvent
	b.ReportAllocs()
	for b.Loop() {
		cn.handle(data)
		if batch, _ = cn.c.events.take(batch); len(batch) != 1 || batch[0].Cursor != 2 {
			b.Fatal(batch)
		}
	}
}

// replyTo routes frame through the reader as the reply to a request with frame id "r1", and
// decodes it into out as that request does.
func replyTo(t *testing.T, frame string, out any) error {
	t.Helper()
	cn := bareConn()
	ch := make(chan reply, 1)
	cn.pending["r1"] = ch
	cn.handle([]byte(frame))
	select {
	case r := <-ch:
		return r.decode(out)
	default:
		t.Fatalf("%s was not routed to r1", frame)
		return nil
	}
}

func TestReplyDecoded(t *testing.T) {
	var ack MessageAck
	if err := replyTo(t, `{"id":"r1","code":0,"seq":3,"msg_id":"m"}`, &ack); err != nil || ack.Seq != 3 || ack.MsgID != "m" {
		t.Fatalf("success: %v %+v", err, ack)
	}
	ack = MessageAck{}
	want := MessageAck{ConvID: "c1", ClientMsgID: "m1", MsgID: "x9", Seq: 4, CreatedAt: 1700000000000, Duplicate: true}
	if err := replyTo(t, `{"id":"r1","code":0,"conv_id":"c1","client_msg_id":"m1","msg_id":"x9","seq":4,"created_at":1700000000000,"duplicate":true}`, &ack); err != nil || ack != want {
		t.Fatalf("send ack: %v %+v, want %+v", err, ack, want)
	}
	var pos struct {
		ConvID string `json:"conv_id"`
	}
	if err := replyTo(t, `{"id":"r1","code":0,"conv_id":"c1","client_msg_id":"m1","msg_id":"x9","seq":4,"created_at":1,"duplicate":false}`, &pos); err != nil || pos.ConvID != "c1" {
		t.Fatalf("an ack-shaped reply into another result: %v %+v", err, pos)
	}
	if err := replyTo(t, `{"id":"r1","code":0}`, nil); err != nil {
		t.Fatalf("success without result: %v", err)
	}
	err := replyTo(t, `{"id":"r1","code":429,"error":"slow down","retry_after":2}`, &ack)
	var e *Error
	if !errors.As(err, &e) || e.Code != 429 || e.RetryAfter != 2*time.Second || e.Message != "slow down" {
		t.Fatalf("error reply: %#v", err)
	}
	if err := replyTo(t, `{"id":"r1","code":0,"seq":"x"}`, &ack); err == nil || errors.As(err, &e) {
		t.Fatalf("undecodable result: %v, want a decode error", err)
	}
}

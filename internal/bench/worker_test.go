package bench

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley/client"
)

// The benchmarks of this file are the load generator's own work per message, beside the
// SDK's (client's BenchmarkSendFrame, BenchmarkReplyFrame and BenchmarkPushFrame): a
// direct message costs its sender one send and its ack, and two receptions (the peer's
// device and the sender's own).

const (
	benchConv   = "d_y5zvysbda7fsb4r2wrxjgu6cte"
	benchSender = "bench-r1-a000001"
	benchPeer   = "bench-r1-b000001"
)

// appendMessageData lays out the data of a message event as the server writes it, for
// message seq of benchConv sent by benchSender with content.
func appendMessageData(dst []byte, seq int64, content []byte) []byte {
	dst = append(dst, `{"conv_id":"`+benchConv+`","seq":`...)
	dst = strconv.AppendInt(dst, seq, 10)
	dst = append(dst, `,"msg_id":"m_kdjnrolfoqbolrqvkom7cxrgq`...)
	dst = strconv.AppendInt(dst, seq%10, 10)
	dst = append(dst, `","client_msg_id":"6eed4583-dddf-4094-8762-b797ff5895c9","sender_id":"`+benchSender+`","content_type":1,"content":`...)
	dst = append(dst, content...)
	return append(dst, `,"extra":null,"created_at":1796143125885,"recalled":false}`...)
}

func benchWorker(b *testing.B) (*worker, *device) {
	b.Helper()
	w := newWorker(&Job{Scenario: "direct", Size: 64, Interval: time.Second}, nil)
	w.rec.begin(time.Now())
	d := newDevice(w, DeviceSpec{Account: Account{User: benchPeer, Device: "d1"}, Convs: map[string]int64{benchConv: 0}, Online: true})
	return w, d
}

// BenchmarkReceiveMessage is a device's handling of one message event: the stream's checks
// (cursor, seq, digest), the send time read from the content and the delivery recorded.
func BenchmarkReceiveMessage(b *testing.B) {
	w, d := benchWorker(b)
	content := w.content(time.Now())
	var data []byte
	seq := int64(0)
	b.ReportAllocs()
	for b.Loop() {
		seq++
		data = appendMessageData(data[:0], seq, content)
		d.onEvent(client.SyncEvent{Cursor: seq, Type: client.EventMessage, ConvID: benchConv, TS: 1796143125885, Data: data})
	}
	if n := w.v.Count(); n != 0 || w.rec.delivered.Load() != seq {
		b.Fatalf("%d violations, %d deliveries of %d: %v", n, w.rec.delivered.Load(), seq, w.v.samples)
	}
}

// BenchmarkSendBookkeeping is the worker's side of one send around the SDK call: its
// operation context, the content and the ack recorded and checked.
func BenchmarkSendBookkeeping(b *testing.B) {
	w, d := benchWorker(b)
	ctx := context.Background()
	seq := int64(0)
	b.ReportAllocs()
	for b.Loop() {
		seq++
		intended := time.Now()
		octx, cancel := opContext(ctx)
		_ = w.content(intended)
		cancel()
		_ = octx
		ack := client.MessageAck{ConvID: benchConv, Seq: seq, MsgID: "m_kdjnrolfoqbolrqvkom7cxrgqm", CreatedAt: 1796143125885}
		w.acked(d, ack, intended, time.Now(), true)
	}
	if n := w.v.Count(); n != 0 {
		b.Fatalf("%d violations", n)
	}
}

// BenchmarkEchoFrame is the echo scenario's work per round trip besides the socket: the
// frame built and the echo compared with it.
func BenchmarkEchoFrame(b *testing.B) {
	w, _ := benchWorker(b)
	l := &echoLoad{w: w}
	var buf frameBuf
	b.ReportAllocs()
	for b.Loop() {
		f := l.frame(&buf, echoConvID(0), time.Now())
		l.check(0, f, f)
	}
}

func TestWorkerMaxProcs(t *testing.T) {
	for _, c := range []struct {
		set         string
		cpus, procs int
		want        string
	}{
		{"", 2, 2, "GOMAXPROCS=1"},
		{"", 8, 2, "GOMAXPROCS=4"},
		{"", 2, 4, "GOMAXPROCS=1"},
		{"", 2, 1, ""},
		{"3", 2, 2, ""}, // the operator's own setting is kept
	} {
		got := strings.Join(workerMaxProcs(c.set, c.cpus, c.procs), "")
		if got != c.want {
			t.Errorf("workerMaxProcs(%q, %d, %d) = %q, want %q", c.set, c.cpus, c.procs, got, c.want)
		}
	}
}

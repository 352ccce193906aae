package chat

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/parleychat/parley/internal/live"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

func TestWireEvents(t *testing.T) {
	msg := func(seq int64) *store.Message {
		return &store.Message{ConvID: "d_1", Seq: seq, MsgID: "m_" + strconv.FormatInt(seq, 10),
			ClientMsgID: "c", SenderID: "bob", ContentType: 1, Content: []byte(`{"text":"x"}`)}
	}
	es := []store.Event{
		{Cursor: 1, Type: protocol.EventMessage, ConvID: "d_1", TS: 10, Seq: 1, Message: msg(1)},
		{Cursor: 2, Type: protocol.EventRead, ConvID: "d_1", TS: 11, Data: []byte(`{"user_id":"bob","read_seq":1}`)},
		{Cursor: 3, Type: protocol.EventMessage, ConvID: "d_1", TS: 12, Seq: 2}, // its message is missing
		{Cursor: 4, Type: protocol.EventMessage, ConvID: "d_1", TS: 13, Seq: 3,
			Message: &store.Message{ConvID: "d_1", Seq: 3, Content: []byte(`{`)}}, // not JSON
		{Cursor: 5, Type: protocol.EventMessage, ConvID: "d_1", TS: 14, Seq: 4, Message: msg(4)},
	}
	got := wireEvents(es)
	for i, e := range es {
		want := protocol.SyncEvent{Cursor: e.Cursor, Type: e.Type, ConvID: e.ConvID, TS: e.TS, Data: e.Data}
		switch {
		case e.Type != protocol.EventMessage:
		case e.Message == nil:
			want.Data = json.RawMessage("null")
		default:
			want.Data, _ = json.Marshal(live.WireMessage(*e.Message))
		}
		g, w := got[i], want
		if g.Cursor != w.Cursor || g.Type != w.Type || g.ConvID != w.ConvID || g.TS != w.TS ||
			!bytes.Equal(g.Data, w.Data) || (g.Data == nil) != (w.Data == nil) {
			t.Errorf("event %d = %+v (data %q), want %+v (data %q)", i, g, g.Data, w, w.Data)
		}
	}
	// Payloads share a buffer: appending to one must not overwrite the next.
	_ = append(got[0].Data, "xxxxxxxx"...)
	if want, _ := json.Marshal(live.WireMessage(*msg(4))); !bytes.Equal(got[4].Data, want) {
		t.Errorf("appending to one payload changed another: %q", got[4].Data)
	}
}

func BenchmarkWireEvents(b *testing.B) {
	es := make([]store.Event, protocol.MaxSyncLimit)
	for i := range es {
		seq := int64(i + 1)
		es[i] = store.Event{Cursor: seq, Type: protocol.EventMessage, ConvID: "d_cqnez5ab", TS: 1795999222115, Seq: seq,
			Message: &store.Message{ConvID: "d_cqnez5ab", Seq: seq, MsgID: "m_evavb" + strconv.Itoa(i),
				ClientMsgID: "alice-" + strconv.Itoa(i), SenderID: "alice", ContentType: 1,
				Content: []byte(`{"text":"hello, world"}`), CreatedAt: 1795999222115}}
	}
	b.ReportAllocs()
	for b.Loop() {
		wireEvents(es)
	}
	b.ReportMetric(float64(b.N*len(es))/b.Elapsed().Seconds(), "events/s")
}

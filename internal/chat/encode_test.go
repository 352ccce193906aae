package chat

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// reflectMessageJSON is what appendMessageJSON must produce: the reflective encoding.
func reflectMessageJSON(m store.Message) ([]byte, bool) {
	b, err := json.Marshal(wireMessage(m))
	return b, err == nil
}

func TestAppendMessageJSONMatchesReflection(t *testing.T) {
	base := store.Message{
		ConvID: "d_cqnez5", Seq: 7, MsgID: "m_evavb", ClientMsgID: "alice-0005", SenderID: "alice",
		ContentType: 1, Content: []byte(`{"text":"hi Bob"}`), CreatedAt: 1795999222115,
	}
	tests := []struct {
		name string
		edit func(m *store.Message)
	}{
		{"plain", func(*store.Message) {}},
		{"recalled", func(m *store.Message) { m.Content, m.Extra, m.Recalled = nil, nil, true }},
		{"content with spaces and newlines", func(m *store.Message) { m.Content = []byte("{ \"text\" :\n \"a b\" }") }},
		{"content a string", func(m *store.Message) { m.Content = []byte(`"4"`) }},
		{"content with html", func(m *store.Message) { m.Content = []byte(`{"text":"<b>&amp;</b>"}`) }},
		{"content with U+2028", func(m *store.Message) { m.Content = []byte("{\"text\":\"a\u2028b\u2029\"}") }},
		{"content with other E2 runes", func(m *store.Message) { m.Content = []byte(`{"text":"“quoted” — dash"}`) }},
		{"content with escapes", func(m *store.Message) { m.Content = []byte(`{"text":"tab\there \u00e9 \"q\""}`) }},
		{"content not json", func(m *store.Message) { m.Content = []byte(`{"text":`) }},
		{"empty extra", func(m *store.Message) { m.Extra = encodeExtra(map[string]string{}) }},
		{"extra", func(m *store.Message) { m.Extra = encodeExtra(map[string]string{"z": "1", "a": "é", "m": "x\ny"}) }},
		{"extra with html", func(m *store.Message) { m.Extra = encodeExtra(map[string]string{"k": "<a&b>"}) }},
		{"extra with U+2028", func(m *store.Message) { m.Extra = encodeExtra(map[string]string{"k": "a\u2028"}) }},
		{"extra with invalid utf-8", func(m *store.Message) { m.Extra = encodeExtra(map[string]string{"k\xff": "v\xfe"}) }},
		{"client id to escape", func(m *store.Message) { m.ClientMsgID = "a\"b<c>\\\x01é" }},
		{"negative and zero numbers", func(m *store.Message) { m.Seq, m.ContentType, m.CreatedAt = 0, -3, -1 }},
		{"mentions", func(m *store.Message) { m.Mentions = []string{"bob", "a.b@c-d_e"} }},
		{"mentions to escape", func(m *store.Message) { m.Mentions = []string{"<b>", "\u2028", `q"`} }},
		{"empty mentions", func(m *store.Message) { m.Mentions = []string{} }},
		{"mentions with extra to escape", func(m *store.Message) {
			m.Mentions, m.Extra = []string{"bob"}, encodeExtra(map[string]string{"k": "<a&b>"})
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := base
			tc.edit(&m)
			checkMessageJSON(t, m)
		})
	}
}

func checkMessageJSON(t *testing.T, m store.Message) {
	t.Helper()
	want, wantOK := reflectMessageJSON(m)
	prefix := []byte("prefix")
	got, ok := appendMessageJSON(bytes.Clone(prefix), &m)
	if !bytes.HasPrefix(got, prefix) {
		t.Fatalf("appendMessageJSON changed the bytes before it: %q", got)
	}
	got = got[len(prefix):]
	if ok != wantOK || !bytes.Equal(got, want) {
		t.Errorf("appendMessageJSON = %q, %v\njson.Marshal    = %q, %v", got, ok, want, wantOK)
	}
}

func FuzzAppendMessageJSON(f *testing.F) {
	f.Add("d_1", int64(1), "m_1", "c-1", "alice", 1, []byte(`{"text":"hi"}`), "k", "v", false)
	f.Add("d_<", int64(-5), "", "\xff", "\u2028", 0, []byte(" [1, 2] "), "", "", true)
	f.Add("d_1", int64(1), "m_1", "c-1", "alice", 1, []byte(`{"a":"<&>"}`), "é", "\u2029", false)
	f.Add("d_1", int64(1), "m_1", "c-1", "alice", 1, []byte(`{`), "", "", false)
	f.Fuzz(func(t *testing.T, conv string, seq int64, msgID, clientID, sender string, ct int,
		content []byte, key, val string, recalled bool) {
		m := store.Message{
			ConvID: conv, Seq: seq, MsgID: msgID, ClientMsgID: clientID, SenderID: sender,
			ContentType: ct, Content: content, CreatedAt: seq * 3, Recalled: recalled,
		}
		if key != "" || val != "" {
			m.Extra = encodeExtra(map[string]string{key: val, "x" + key: val + "y"})
		}
		checkMessageJSON(t, m)
	})
}

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
			want.Data, _ = json.Marshal(wireMessage(*e.Message))
		}
		g, w := got[i], want
		if g.Cursor != w.Cursor || g.Type != w.Type || g.ConvID != w.ConvID || g.TS != w.TS ||
			!bytes.Equal(g.Data, w.Data) || (g.Data == nil) != (w.Data == nil) {
			t.Errorf("event %d = %+v (data %q), want %+v (data %q)", i, g, g.Data, w, w.Data)
		}
	}
	// Payloads share a buffer: appending to one must not overwrite the next.
	_ = append(got[0].Data, "xxxxxxxx"...)
	if want, _ := json.Marshal(wireMessage(*msg(4))); !bytes.Equal(got[4].Data, want) {
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

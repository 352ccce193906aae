package live

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/parleychat/parley/internal/store"
)

// reflectMessageJSON is what AppendMessageJSON must produce: the reflective encoding.
func reflectMessageJSON(m store.Message) ([]byte, bool) {
	b, err := json.Marshal(WireMessage(m))
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
		{"empty extra", func(m *store.Message) { m.Extra = EncodeExtra(map[string]string{}) }},
		{"extra", func(m *store.Message) { m.Extra = EncodeExtra(map[string]string{"z": "1", "a": "é", "m": "x\ny"}) }},
		{"extra with html", func(m *store.Message) { m.Extra = EncodeExtra(map[string]string{"k": "<a&b>"}) }},
		{"extra with U+2028", func(m *store.Message) { m.Extra = EncodeExtra(map[string]string{"k": "a\u2028"}) }},
		{"extra with invalid utf-8", func(m *store.Message) { m.Extra = EncodeExtra(map[string]string{"k\xff": "v\xfe"}) }},
		{"client id to escape", func(m *store.Message) { m.ClientMsgID = "a\"b<c>\\\x01é" }},
		{"negative and zero numbers", func(m *store.Message) { m.Seq, m.ContentType, m.CreatedAt = 0, -3, -1 }},
		{"mentions", func(m *store.Message) { m.Mentions = []string{"bob", "a.b@c-d_e"} }},
		{"mentions to escape", func(m *store.Message) { m.Mentions = []string{"<b>", "\u2028", `q"`} }},
		{"empty mentions", func(m *store.Message) { m.Mentions = []string{} }},
		{"mentions with extra to escape", func(m *store.Message) {
			m.Mentions, m.Extra = []string{"bob"}, EncodeExtra(map[string]string{"k": "<a&b>"})
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
	got, ok := AppendMessageJSON(bytes.Clone(prefix), &m)
	if !bytes.HasPrefix(got, prefix) {
		t.Fatalf("AppendMessageJSON changed the bytes before it: %q", got)
	}
	got = got[len(prefix):]
	if ok != wantOK || !bytes.Equal(got, want) {
		t.Errorf("AppendMessageJSON = %q, %v\njson.Marshal    = %q, %v", got, ok, want, wantOK)
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
			m.Extra = EncodeExtra(map[string]string{key: val, "x" + key: val + "y"})
		}
		checkMessageJSON(t, m)
	})
}

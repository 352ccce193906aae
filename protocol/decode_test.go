package protocol

import (
	"encoding/json"
	"reflect"
	"testing"
)

// checkDecodeMessage fails unless decodeMessage either declines b or decodes it exactly as
// encoding/json does, and returns whether it accepted it.
func checkDecodeMessage(t *testing.T, b []byte) bool {
	t.Helper()
	got, ok := decodeMessage(b)
	if !ok {
		return false
	}
	var want Message
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatalf("decodeMessage accepted %q, which encoding/json refuses: %v", b, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeMessage(%q)\n = %#v\nencoding/json gives\n   %#v", b, got, want)
	}
	return true
}

func TestDecodeMessage(t *testing.T) {
	full := func(m Message) []byte {
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	base := Message{ConvID: "d_1", Seq: 7, MsgID: "m_1", ClientMsgID: "c-1", SenderID: "alice",
		ContentType: 1, Content: json.RawMessage(`{"text":"hi"}`), CreatedAt: 1795999222115}
	with := func(edit func(m *Message)) []byte {
		m := base
		edit(&m)
		return full(m)
	}
	tests := []struct {
		name string
		in   []byte
		fast bool // whether the fast path takes it
	}{
		{"server layout", full(base), true},
		{"recalled", with(func(m *Message) { m.Content, m.Recalled = nil, true }), true},
		{"extra", with(func(m *Message) { m.Extra = map[string]string{"a": "é", "b": ""} }), true},
		{"empty extra", with(func(m *Message) { m.Extra = map[string]string{} }), true},
		{"content a nested value", with(func(m *Message) { m.Content = json.RawMessage(`[1,{"a":"}]\""},null]`) }), true},
		{"content a number", with(func(m *Message) { m.Content = json.RawMessage(`-1.5e3`) }), true},
		{"escaped id", with(func(m *Message) { m.ClientMsgID = "a\"b" }), false},
		{"html in content", with(func(m *Message) { m.Content = json.RawMessage(`"<b>"`) }), true},
		{"white space", []byte(`{"conv_id": "d_1","seq":1}`), false},
		{"other order", []byte(`{"seq":1,"conv_id":"d_1"}`), false},
		{"duplicate names in extra", []byte(`{"conv_id":"d","seq":1,"msg_id":"m","client_msg_id":"c","sender_id":"s","content_type":1,"content":1,"extra":{"a":"1","a":"2"},"created_at":1,"recalled":false}`), true},
		{"duplicate names in content", []byte(`{"conv_id":"d","seq":1,"msg_id":"m","client_msg_id":"c","sender_id":"s","content_type":1,"content":{"a":1,"a":2},"extra":null,"created_at":1,"recalled":false}`), false},
		{"invalid utf-8 in an id", []byte("{\"conv_id\":\"d\xff\",\"seq\":1,\"msg_id\":\"m\",\"client_msg_id\":\"c\",\"sender_id\":\"s\",\"content_type\":1,\"content\":1,\"extra\":null,\"created_at\":1,\"recalled\":false}"), false},
		{"leading zero", []byte(`{"conv_id":"d","seq":01,"msg_id":"m","client_msg_id":"c","sender_id":"s","content_type":1,"content":1,"extra":null,"created_at":1,"recalled":false}`), false},
		{"seq a float", []byte(`{"conv_id":"d","seq":1.0,"msg_id":"m","client_msg_id":"c","sender_id":"s","content_type":1,"content":1,"extra":null,"created_at":1,"recalled":false}`), false},
		{"truncated", full(base)[:40], false},
		{"trailing data", append(full(base), ' '), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if fast := checkDecodeMessage(t, tc.in); fast != tc.fast {
				t.Errorf("fast path taken: %v, want %v", fast, tc.fast)
			}
		})
	}
}

func FuzzDecodeMessage(f *testing.F) {
	f.Add([]byte(`{"conv_id":"d_1","seq":7,"msg_id":"m_1","client_msg_id":"c-1","sender_id":"alice","content_type":1,"content":{"text":"hi"},"extra":null,"created_at":1795999222115,"recalled":false}`))
	f.Add([]byte(`{"conv_id":"d_1","seq":-7,"msg_id":"","client_msg_id":"é","sender_id":"a","content_type":0,"content":null,"extra":{"k":"v","x":""},"created_at":0,"recalled":true}`))
	f.Add([]byte(`{"conv_id":"d","seq":1,"msg_id":"m","client_msg_id":"c","sender_id":"s","content_type":1,"content":"a\"b\\","extra":{},"created_at":1,"recalled":false}`))
	f.Fuzz(func(t *testing.T, b []byte) { checkDecodeMessage(t, b) })
}

func BenchmarkDecodeMessage(b *testing.B) {
	data := []byte(`{"conv_id":"d_cqnez5abcdefghijklmnopq","seq":51,"msg_id":"m_gkgyjabcdefghijklmnopq","client_msg_id":"b7d9c1e2-1f4e-4a57-9c61-2a1b3c4d5e6f","sender_id":"r1a2b3-p17","content_type":1,"content":{"text":"m51"},"extra":null,"created_at":1795999222083,"recalled":false}`)
	ev := SyncEvent{Cursor: 1, Type: EventMessage, ConvID: "d_cqnez5abcdefghijklmnopq", Data: data}
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ev.Message(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := eventData[Message](ev, EventMessage); err != nil {
				b.Fatal(err)
			}
		}
	})
}

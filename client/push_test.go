package client

import (
	"encoding/json"
	"reflect"
	"testing"
)

// checkDecodePush fails unless decodePush either declines frame or decodes it as handle's
// encoding/json path does, and returns whether it accepted it.
func checkDecodePush(t *testing.T, frame []byte) bool {
	t.Helper()
	got, ok := decodePush(frame)
	if !ok {
		return false
	}
	var f inFrame
	if err := json.Unmarshal(frame, &f); err != nil {
		t.Fatalf("decodePush accepted %q, which encoding/json refuses: %v", frame, err)
	}
	if f.Op != "event" || f.ID != "" || f.Event == nil || !reflect.DeepEqual(got, *f.Event) {
		t.Fatalf("decodePush(%q) = %#v\nencoding/json gives %#v", frame, got, f)
	}
	return true
}

func TestDecodePush(t *testing.T) {
	tests := []struct {
		name  string
		frame string
		fast  bool
	}{
		{"message", `{"op":"event","event":{"cursor":27,"type":"message","conv_id":"d_cq","ts":1795999225219,"data":{"conv_id":"d_cq","seq":11,"content":{"text":"pong"},"extra":null}}}`, true},
		{"read", `{"op":"event","event":{"cursor":29,"type":"read","conv_id":"d_cq","ts":1,"data":{"user_id":"bob","read_seq":12}}}`, true},
		{"null data", `{"op":"event","event":{"cursor":1,"type":"message","conv_id":"d","ts":1,"data":null}}`, true},
		{"reply", `{"id":"7","code":0,"op":"pong"}`, false},
		{"error push", `{"op":"error","code":409,"error":"conflict"}`, false},
		{"white space", `{"op": "event","event":{"cursor":1,"type":"read","conv_id":"d","ts":1,"data":{}}}`, false},
		{"an id too", `{"op":"event","event":{"cursor":1,"type":"read","conv_id":"d","ts":1,"data":{}},"id":"x"}`, false},
		{"data not json", `{"op":"event","event":{"cursor":1,"type":"read","conv_id":"d","ts":1,"data":{"a":}}}`, false},
		{"escaped type", `{"op":"event","event":{"cursor":1,"type":"re\u0061d","conv_id":"d","ts":1,"data":{}}}`, false},
		{"cursor a float", `{"op":"event","event":{"cursor":1.5,"type":"read","conv_id":"d","ts":1,"data":{}}}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if fast := checkDecodePush(t, []byte(tc.frame)); fast != tc.fast {
				t.Errorf("fast path taken: %v, want %v", fast, tc.fast)
			}
		})
	}
}

func FuzzDecodePush(f *testing.F) {
	f.Add([]byte(`{"op":"event","event":{"cursor":27,"type":"message","conv_id":"d_cq","ts":1795999225219,"data":{"conv_id":"d_cq","seq":11,"content":{"text":"pong"},"extra":null}}}`))
	f.Add([]byte(`{"op":"event","event":{"cursor":-0,"type":"é","conv_id":"","ts":0,"data":"x\"}}"}}`))
	f.Fuzz(func(t *testing.T, frame []byte) { checkDecodePush(t, frame) })
}

func BenchmarkDecodePush(b *testing.B) {
	frame := []byte(`{"op":"event","event":{"cursor":123456,"type":"message","conv_id":"d_cqnez5abcdefghijklmnopq","ts":1795999222083,"data":{"conv_id":"d_cqnez5abcdefghijklmnopq","seq":51,"msg_id":"m_gkgyjabcdefghijklmnopq","client_msg_id":"b7d9c1e2-1f4e-4a57-9c61-2a1b3c4d5e6f","sender_id":"r1a2b3-p17","content_type":1,"content":{"text":"m51"},"extra":null,"created_at":1795999222083,"recalled":false}}}`)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := decodePush(frame); !ok {
				b.Fatal("not decoded")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var f inFrame
			if err := json.Unmarshal(frame, &f); err != nil {
				b.Fatal(err)
			}
		}
	})
}

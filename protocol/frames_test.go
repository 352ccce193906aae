package protocol

import (
	"encoding/json"
	"testing"
)

// marshalFrame is what AppendFrame must equal: the envelope and params marshalled apart,
// then joined.
func marshalFrame(t testing.TB, id, op string, params []byte) string {
	head, err := json.Marshal(Frame{ID: id, Op: op})
	if err != nil {
		t.Fatal(err)
	}
	if len(params) <= 2 {
		return string(head)
	}
	return string(head[:len(head)-1]) + "," + string(params[1:])
}

func TestAppendFrame(t *testing.T) {
	for _, tt := range []struct {
		name, id, op, params, want string
	}{
		{"no params", "r1", OpPing, "", `{"id":"r1","op":"ping"}`},
		{"empty params", "r1", OpPing, "{}", `{"id":"r1","op":"ping"}`},
		{"params", "r2", OpRead, `{"conv_id":"c1","seq":4}`, `{"id":"r2","op":"read","conv_id":"c1","seq":4}`},
		{"escaped id", "a\"<\u2028", OpSync, `{"cursor":1}`, `{"id":"a\"\u003c\u2028","op":"sync","cursor":1}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var params []byte
			if tt.params != "" {
				params = []byte(tt.params)
			}
			got := string(AppendFrame([]byte("x"), tt.id, tt.op, params))
			if got != "x"+tt.want || tt.want != marshalFrame(t, tt.id, tt.op, params) {
				t.Fatalf("got %s, want x%s (json.Marshal: %s)", got, tt.want, marshalFrame(t, tt.id, tt.op, params))
			}
		})
	}
}

func TestAppendSendRequestIsMarshal(t *testing.T) {
	for _, tt := range []struct {
		name string
		req  SendRequest
	}{
		{"text", SendRequest{ConvID: "d_y5zvysbda7fsb4r2wrxjgu6cte", ClientMsgID: "6eed4583-dddf-4094-8762-b797ff5895c9", ContentType: ContentText, Content: json.RawMessage(`{"text":"hello"}`)}},
		{"nil content", SendRequest{ConvID: "c", ClientMsgID: "m", ContentType: -3}},
		{"escapes", SendRequest{ConvID: "c\"\\<>&\u2028\x01\xff", ClientMsgID: "é", Content: json.RawMessage(`"\u003c"`)}},
		{"empty extra", SendRequest{ConvID: "c", ClientMsgID: "m", Content: json.RawMessage(`1`), Extra: map[string]string{}}},
		{"extra", SendRequest{ConvID: "c", ClientMsgID: "m", Content: json.RawMessage(`[]`), Extra: map[string]string{"z": "1", "a": "<"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want, err := json.Marshal(&tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if got := AppendSendRequest([]byte("x"), &tt.req); string(got) != "x"+string(want) {
				t.Fatalf("got  %s\nwant x%s", got, want)
			}
		})
	}
}

// FuzzAppendSendRequest holds the encoders to json.Marshal for any strings and content.
func FuzzAppendSendRequest(f *testing.F) {
	f.Add("r1", "d_y5zvysbda7fsb4r2wrxjgu6cte", "6eed4583-dddf-4094-8762-b797ff5895c9", 1, `{"text":"hi"}`, "")
	f.Add("a\"b", "c<>&", "\u2028\xff", -1, `"x"`, "k")
	f.Fuzz(func(t *testing.T, id, conv, msgID string, ctype int, content, extraKey string) {
		raw, err := json.Marshal(json.RawMessage(content)) // as the SDK does: json.Marshal's output
		if err != nil {
			return // not JSON
		}
		req := SendRequest{ConvID: conv, ClientMsgID: msgID, ContentType: ctype, Content: raw}
		if extraKey != "" {
			req.Extra = map[string]string{extraKey: content}
		}
		want, err := json.Marshal(&req)
		if err != nil {
			t.Fatal(err)
		}
		body := AppendSendRequest(nil, &req)
		if string(body) != string(want) {
			t.Fatalf("AppendSendRequest:\ngot  %s\nwant %s", body, want)
		}
		if got, want := string(AppendFrame(nil, id, OpSend, body)), marshalFrame(t, id, OpSend, want); got != want {
			t.Fatalf("AppendFrame:\ngot  %s\nwant %s", got, want)
		}
	})
}

// FuzzAppendString holds the string quoting of every hand-written encoder (the SDK's frames,
// the server's pushes and message payloads) to json.Marshal's bytes.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "message", "g_vqtax", "<&>", "a\"b\\c", "\x00\x1f\x7f", "é\u2028\u2029", "\xff\xc3("} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendString([]byte("x"), s); string(got) != "x"+string(want) {
			t.Fatalf("%q: got %s, want x%s", s, got, want)
		}
	})
}

package protocol

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// Frames as the server writes them for a direct message (captured from a run of `parley
// bench direct`), and other events.
const (
	messageData = `{"conv_id":"d_y5zvysbda7fsb4r2wrxjgu6cte","seq":1,"msg_id":"m_kdjnrolfoqbolrqvkom7cxrgqm","client_msg_id":"6eed4583-dddf-4094-8762-b797ff5895c9","sender_id":"bench-r1-a000001","content_type":1,"content":{"t":1796143125884602770,"text":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxx"},"extra":null,"created_at":1796143125885,"recalled":false}`
	messagePush = `{"op":"event","event":{"cursor":2,"type":"message","conv_id":"d_y5zvysbda7fsb4r2wrxjgu6cte","ts":1796143125885,"data":` + messageData + `}}`
	updatedPush = `{"op":"event","event":{"cursor":1,"type":"conv_updated","conv_id":"d_y7636fglpk2oqyih2ltj2qs46m","ts":1796143120915,"data":{"conv_id":"d_y7636fglpk2oqyih2ltj2qs46m","type":"direct","name":"","owner_id":"","members_count":2,"fanout":"write","max_seq":0,"read_seq":0,"delivered_seq":0,"cleared_seq":0,"unread":0,"last_message":null,"peer_read_seq":0,"peer_delivered_seq":0,"updated_at":1796143120915}}}`
)

// ackSeeds are replies in and out of the server's layout for a send's ack.
var ackSeeds = []string{
	`{"id":"r1","code":0,"conv_id":"d_y5zvysbda7fsb4r2wrxjgu6cte","client_msg_id":"6eed4583-dddf-4094-8762-b797ff5895c9","msg_id":"m_kdjnrolfoqbolrqvkom7cxrgqm","seq":1,"created_at":1796143125885,"duplicate":false}`,
	`{"id":"f1","code":0,"conv_id":"c1","client_msg_id":"m1","msg_id":"x9","seq":4,"created_at":1700000000000,"duplicate":true}`,
	`{"id":"f1","code":0,"conv_id":"c1","client_msg_id":"m1","msg_id":"x9","seq":4,"created_at":1700000000000,"duplicate":true,"code":500}`,
	`{"id":"f1","code":0,"conv_id":"c1","client_msg_id":"m1","msg_id":"x9","seq":4,"created_at":1700000000000,"duplicate":true} `,
	`{"id":"f\u0031","code":0,"conv_id":"c1","client_msg_id":"m1","msg_id":"x9","seq":4,"created_at":17,"duplicate":false}`,
	`{"id":"f1","code":429,"error":"slow down","retry_after":2}`,
	`{"id":"f1","code":0,"read_seq":7}`,
}

// pushSeeds are event pushes in and out of the server's layout.
var pushSeeds = []string{
	messagePush,
	updatedPush,
	`{"op":"event","event":{"cursor":12,"type":"read","conv_id":"c1","ts":1700000000000,"data":{"user_id":"bob","read_seq":5}}}`,
	`{"op":"event","event":{"cursor":-3,"type":"x","conv_id":"","ts":-0,"data":null}}`,
	`{"op":"event","event":{"cursor":0,"type":"recall","conv_id":"c","ts":0,"data":[1, 2]}}`,
	`{"op":"event","event":{"cursor":1,"type":"t\"","conv_id":"c","ts":0,"data":1}}`,
	`{"op":"event","event":{"cursor":1,"type":"é","conv_id":"c","ts":0,"data":1}}`,
	`{"op":"event","event":{"cursor":1.5,"type":"t","conv_id":"c","ts":0,"data":1}}`,
	`{"op":"event","event":{"cursor":9223372036854775808,"type":"t","conv_id":"c","ts":0,"data":1}}`,
	`{"op":"event","event":{"cursor":01,"type":"t","conv_id":"c","ts":0,"data":1}}`,
	`{"op":"event","event":{"cursor":1,"type":"t","conv_id":"c","ts":0,"data": 1}}`,
	`{"op":"event","event":{"cursor":1,"type":"t","conv_id":"c","ts":0,"data":1,"x":2}}`,
	`{"op":"event","event":{"cursor":1,"type":"t","conv_id":"c","ts":0,"data":{"a":1}}},"id":"r1"}`,
	`{"op":"event","event":{"cursor":1,"type":"t","conv_id":"c","ts":0,"data":{"a":}}}`,
	`{"op":"event","event":{"cursor":1,"type":"t","conv_id":"c","ts":0,"data":}}`,
	`{"id":"r1","code":0}`,
	`{"op":"error","code":409,"error":"conflict"}`,
	`{"op":"event","event":{"cursor":1,"type":"re\u0061d","conv_id":"d","ts":1,"data":{}}}`,
	`{"op":"event","event":{"cursor":-0,"type":"é","conv_id":"","ts":0,"data":"x\"}}"}}`,
}

// messageSeeds are message event data in and out of the server's layout.
var messageSeeds = []string{
	messageData,
	`{"conv_id":"","seq":-1,"msg_id":"","client_msg_id":"","sender_id":"","content_type":-7,"content":null,"extra":null,"created_at":0,"recalled":true}`,
	`{"conv_id":"c","seq":1,"msg_id":"m","client_msg_id":"k","sender_id":"a","content_type":1,"content":{"a":1,"extra":null,"created_at":2},"extra":null,"created_at":3,"recalled":false}`,
	`{"conv_id":"c","seq":1,"msg_id":"m","client_msg_id":"k","sender_id":"a","content_type":1,"content":"x","extra":{"k":"v"},"created_at":3,"recalled":false}`,
	`{"conv_id":"c","seq":1,"msg_id":"m","client_msg_id":"k","sender_id":"a","content_type":1,"content":1,2,"extra":null,"created_at":3,"recalled":false}`,
	`{"conv_id":"c","seq":1,"msg_id":"m","client_msg_id":"k","sender_id":"a","content_type":1,"content":1,"extra":null,"created_at":-,"recalled":false}`,
	`{"conv_id":"c","seq":1,"msg_id":"m","client_msg_id":"k","sender_id":"a","content_type":1,"content":1,"extra":null,"created_at":1e3,"recalled":false}`,
	`{"conv_id":"c","seq":1,"msg_id":"m","client_msg_id":"k","sender_id":"a","content_type":1,"content":1,"extra":null,"created_at":1,"recalled":false} `,
	`{"conv_id":"c","seq":1,"msg_id":"m","client_msg_id":"k","sender_id":"a","content_type":1,"content":1,"extra":null,"created_at":1,"recalled":false,"seq":2}`,
	`{"conv_id":"d_1","seq":-7,"msg_id":"","client_msg_id":"é","sender_id":"a","content_type":0,"content":null,"extra":{"k":"v","x":""},"created_at":0,"recalled":true}`,
	`{"conv_id":"d","seq":1,"msg_id":"m","client_msg_id":"c","sender_id":"s","content_type":1,"content":"a\"b\\","extra":{},"created_at":1,"recalled":false}`,
}

func TestReadEventPushReadsTheServersLayout(t *testing.T) {
	for _, frame := range []string{messagePush, updatedPush, pushSeeds[2], pushSeeds[3], pushSeeds[4]} {
		if _, ok := ReadEventPush([]byte(frame)); !ok {
			t.Errorf("not read: %s", frame)
		}
	}
	ev, _ := ReadEventPush([]byte(messagePush))
	if ev.Cursor != 2 || ev.Type != EventMessage || ev.ConvID != "d_y5zvysbda7fsb4r2wrxjgu6cte" || ev.TS != 1796143125885 || string(ev.Data) != messageData {
		t.Fatalf("read %+v", ev)
	}
	for _, frame := range pushSeeds[5:] {
		checkPush(t, []byte(frame)) // read or not, never differently from encoding/json
	}
}

func TestReadMessageReadsTheServersLayout(t *testing.T) {
	for _, data := range messageSeeds[:3] {
		if _, ok := readMessage([]byte(data)); !ok {
			t.Errorf("not read: %s", data)
		}
	}
	for _, data := range messageSeeds {
		checkMessage(t, []byte(data))
	}
	m, err := SyncEvent{Type: EventMessage, ConvID: "c", Data: json.RawMessage(messageSeeds[1])}.Message()
	if err != nil || m.ConvID != "c" || !m.Recalled || string(m.Content) != "null" {
		t.Fatalf("Message() = %+v, %v: want conv_id from the event, recalled, null content", m, err)
	}
}

func TestReadAckReadsTheServersLayout(t *testing.T) {
	for _, frame := range ackSeeds[:2] {
		if _, _, ok := ReadAck([]byte(frame)); !ok {
			t.Errorf("not read: %s", frame)
		}
	}
	id, ack, _ := ReadAck([]byte(ackSeeds[1]))
	if want := (MessageAck{ConvID: "c1", ClientMsgID: "m1", MsgID: "x9", Seq: 4, CreatedAt: 1700000000000, Duplicate: true}); id != "f1" || ack != want {
		t.Fatalf("read %q %+v", id, ack)
	}
	for _, frame := range ackSeeds {
		checkAck(t, []byte(frame))
	}
}

// TestReadMessageTakesOnlyTheServersLayout says which message data readMessage reads itself
// (fast) and which it leaves to encoding/json; either way, Message gives what encoding/json
// gives.
func TestReadMessageTakesOnlyTheServersLayout(t *testing.T) {
	marshal := func(m Message) []byte {
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
		return marshal(m)
	}
	const head = `{"conv_id":"d","seq":1,"msg_id":"m","client_msg_id":"c","sender_id":"s","content_type":1,`
	tests := []struct {
		name string
		data []byte
		fast bool
	}{
		{"server layout", marshal(base), true},
		{"recalled", with(func(m *Message) { m.Content, m.Recalled = nil, true }), true},
		{"content a nested value", with(func(m *Message) { m.Content = json.RawMessage(`[1,{"a":"}]\""},null]`) }), true},
		{"content a number", with(func(m *Message) { m.Content = json.RawMessage(`-1.5e3`) }), true},
		{"html in content", with(func(m *Message) { m.Content = json.RawMessage(`"<b>"`) }), true},
		{"duplicate names in content", []byte(head + `"content":{"a":1,"a":2},"extra":null,"created_at":1,"recalled":false}`), true},
		{"extra", with(func(m *Message) { m.Extra = map[string]string{"a": "é", "b": ""} }), false},
		{"empty extra", with(func(m *Message) { m.Extra = map[string]string{} }), false},
		{"escaped id", with(func(m *Message) { m.ClientMsgID = "a\"b" }), false},
		{"white space", []byte(`{"conv_id": "d_1","seq":1}`), false},
		{"other order", []byte(`{"seq":1,"conv_id":"d_1"}`), false},
		{"invalid utf-8 in an id", []byte("{\"conv_id\":\"d\xff\",\"seq\":1,\"msg_id\":\"m\",\"client_msg_id\":\"c\",\"sender_id\":\"s\",\"content_type\":1,\"content\":1,\"extra\":null,\"created_at\":1,\"recalled\":false}"), false},
		{"leading zero", []byte(`{"conv_id":"d","seq":01,"msg_id":"m","client_msg_id":"c","sender_id":"s","content_type":1,"content":1,"extra":null,"created_at":1,"recalled":false}`), false},
		{"seq a float", []byte(`{"conv_id":"d","seq":1.0,"msg_id":"m","client_msg_id":"c","sender_id":"s","content_type":1,"content":1,"extra":null,"created_at":1,"recalled":false}`), false},
		{"truncated", marshal(base)[:40], false},
		{"trailing data", append(marshal(base), ' '), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, fast := readMessage(tc.data); fast != tc.fast {
				t.Errorf("read without encoding/json: %v, want %v", fast, tc.fast)
			}
			checkMessage(t, tc.data)
		})
	}
}

// checkAck fails if ReadAck reads frame other than json.Unmarshal does.
func checkAck(t *testing.T, frame []byte) {
	t.Helper()
	id, ack, ok := ReadAck(frame)
	if !ok {
		return
	}
	var r ReplyFrame
	var want MessageAck
	if err := json.Unmarshal(frame, &r); err != nil || json.Unmarshal(frame, &want) != nil {
		t.Fatalf("read %s, which encoding/json refuses: %v", frame, err)
	}
	if r.ID != id || r.Code != 0 || r.Error != "" || r.RetryAfter != 0 || ack != want {
		t.Fatalf("read %s as %q %+v; encoding/json: %+v %+v", frame, id, ack, r, want)
	}
}

// checkPush fails if ReadEventPush reads frame other than json.Unmarshal does.
func checkPush(t *testing.T, frame []byte) {
	t.Helper()
	ev, ok := ReadEventPush(frame)
	if !ok {
		return
	}
	var f PushFrame
	var envelope struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(frame, &f); err != nil || json.Unmarshal(frame, &envelope) != nil {
		t.Fatalf("read %s, which encoding/json refuses: %v", frame, err)
	}
	if f.Op != OpEvent || f.Event == nil || envelope.ID != "" || f.Code != 0 || f.Error != "" {
		t.Fatalf("read %s as an event push; encoding/json: %+v, id %q", frame, f, envelope.ID)
	}
	if !reflect.DeepEqual(ev, *f.Event) {
		t.Fatalf("read %s as\n%+v\nencoding/json:\n%+v", frame, ev, *f.Event)
	}
}

// checkMessage fails if readMessage reads data other than json.Unmarshal does.
func checkMessage(t *testing.T, data []byte) {
	t.Helper()
	m, ok := readMessage(data)
	if !ok {
		return
	}
	var want Message
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatalf("read %s, which encoding/json refuses: %v", data, err)
	}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("read %s as\n%+v\nencoding/json:\n%+v", data, m, want)
	}
	if len(m.Content) > 0 && len(data) > 0 && &m.Content[0] == &data[bytes.Index(data, m.Content)] {
		t.Fatal("content is not a copy")
	}
}

func FuzzReadAck(f *testing.F) {
	for _, s := range ackSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, frame []byte) { checkAck(t, frame) })
}

func FuzzReadEventPush(f *testing.F) {
	for _, s := range pushSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, frame []byte) { checkPush(t, frame) })
}

func FuzzReadMessage(f *testing.F) {
	for _, s := range messageSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkMessage(t, data)
		// The same as a push, through the reader the SDK uses.
		checkPush(t, []byte(strings.Replace(pushSeeds[2], `{"user_id":"bob","read_seq":5}`, string(data), 1)))
	})
}

func BenchmarkReadEventPush(b *testing.B) {
	frame := []byte(messagePush)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := ReadEventPush(frame); !ok {
			b.Fatal("not read")
		}
	}
}

// BenchmarkMessage compares Message, which reads the server's layout itself, with
// encoding/json on the same data.
func BenchmarkMessage(b *testing.B) {
	ev := SyncEvent{Cursor: 2, Type: EventMessage, ConvID: "d_y5zvysbda7fsb4r2wrxjgu6cte", Data: json.RawMessage(messageData)}
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

// valueSeeds are JSON values and near misses, without white space around them.
var valueSeeds = []string{
	`{}`, `[]`, `""`, `0`, `-0`, `1.5e+3`, `-12.0E-7`, `true`, `false`, `null`,
	`{"a":[1,{"b":null}],"c":"\"\\\/\b\f\n\r\t\u00e9\uD83D"}`, "\"\xff\xfe\"", `[1 , 2 ]`, "{ \"a\" :\t1\n}",
	`01`, `1.`, `.5`, `1e`, `1e+`, `-`, `+1`, `tru`, `nul`, `[1,]`, `{"a":1,}`, `{"a"}`, `{1:2}`, `[1 2]`,
	`"\x"`, `"\u12"`, `"\u12g4"`, "\"a\x01\"", `"a`, `{"a":1}}`, `[[]`, `1 2`, `"\`, `{"a":1 "b":2}`,
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000),
	strings.Repeat(`{"a":`, 10001) + "1" + strings.Repeat("}", 10001),
}

// checkValue fails if isValue and json.Valid disagree about b.
func checkValue(t *testing.T, b []byte) {
	t.Helper()
	want := json.Valid(b) && len(b) > 0 && !isSpace(b[0]) && !isSpace(b[len(b)-1])
	if got := isValue(b); got != want {
		t.Fatalf("isValue(%.200q) = %v, json.Valid says %v", b, got, want)
	}
}

func TestIsValue(t *testing.T) {
	for _, s := range valueSeeds {
		checkValue(t, []byte(s))
	}
	for _, s := range valueSeeds[:14] {
		if !isValue([]byte(s)) {
			t.Errorf("%q refused", s)
		}
	}
}

func FuzzIsValue(f *testing.F) {
	for _, s := range valueSeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(messageData))
	f.Add([]byte(updatedPush))
	f.Fuzz(func(t *testing.T, b []byte) { checkValue(t, b) })
}

var noticeSeeds = []string{
	`{"op":"notice","conv_id":"g_cyasarizecybwvhrqqvyjwsh7a","max_seq":4,"unread":1,"pull_delay_ms":956}`,
	`{"op":"notice","conv_id":"g_x","max_seq":0,"unread":0,"pull_delay_ms":0}`,
	`{"op":"notice","conv_id":"g_x","max_seq":-1,"unread":01,"pull_delay_ms":3}`,
	`{"op":"notice","conv_id":"g\u0041","max_seq":1,"unread":1,"pull_delay_ms":1}`,
	`{"op":"notice","conv_id":"g_x","max_seq":1,"unread":1,"pull_delay_ms":1} `,
}

func FuzzReadNoticePush(f *testing.F) {
	for _, s := range noticeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n, ok := ReadNoticePush(data)
		if !ok {
			return
		}
		var want NoticePush
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("read %s, which encoding/json refuses: %v", data, err)
		}
		if n != want {
			t.Fatalf("read %s as %+v, encoding/json: %+v", data, n, want)
		}
	})
}

func FuzzReadMessagePush(f *testing.F) {
	for _, s := range messageSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		data := append([]byte(messagePushHead), msg...)
		data = append(data, '}')
		m, ok := ReadMessagePush(data)
		if !ok {
			return
		}
		var want MessagePush
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("read %s, which encoding/json refuses: %v", data, err)
		}
		if !reflect.DeepEqual(m, want) {
			t.Fatalf("read %s as\n%+v\nencoding/json:\n%+v", data, m, want)
		}
	})
}

func TestReadNoticeAndMessagePushes(t *testing.T) {
	if n, ok := ReadNoticePush([]byte(noticeSeeds[0])); !ok || n.MaxSeq != 4 || n.Unread != 1 || n.PullDelayMS != 956 || n.Op != OpNotice {
		t.Fatalf("notice read as %+v, %v", n, ok)
	}
	for _, bad := range noticeSeeds[2:] {
		if _, ok := ReadNoticePush([]byte(bad)); ok {
			t.Errorf("%s read by the fast path", bad)
		}
	}
	if m, ok := ReadMessagePush([]byte(messagePushHead + messageData + "}")); !ok || m.Message.Seq == 0 {
		t.Fatalf("message push read as %+v, %v", m, ok)
	}
}

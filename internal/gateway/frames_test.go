package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/parleychat/parley/internal/hub"
	"github.com/parleychat/parley/protocol"
)

func TestEncodeReplyGolden(t *testing.T) {
	tests := []struct {
		name   string
		id     string
		result any
		want   string
	}{
		{
			name: "send ack keeps one code",
			id:   "f1",
			result: protocol.MessageAck{ConvID: "c1", ClientMsgID: "m1", MsgID: "x9", Seq: 4,
				CreatedAt: 1700000000000, Duplicate: true},
			want: `{"id":"f1","code":0,"conv_id":"c1","client_msg_id":"m1","msg_id":"x9","seq":4,"created_at":1700000000000,"duplicate":true}`,
		},
		{
			name:   "read position",
			id:     "f2",
			result: protocol.ReadPosition{ReadSeq: 7},
			want:   `{"id":"f2","code":0,"read_seq":7}`,
		},
		{
			name:   "no result fields",
			id:     "f3",
			result: empty{},
			want:   `{"id":"f3","code":0}`,
		},
		{
			name:   "pong",
			id:     "p",
			result: pong{Op: protocol.OpPong},
			want:   `{"id":"p","code":0,"op":"pong"}`,
		},
		{
			name:   "sync",
			id:     "s",
			result: protocol.SyncResponse{Cursor: 3, Events: []protocol.SyncEvent{}, HasMore: false},
			want:   `{"id":"s","code":0,"cursor":3,"events":[],"has_more":false,"mark":0}`,
		},
		{
			name:   "id is escaped",
			id:     "a\"b",
			result: nil,
			want:   `{"id":"a\"b","code":0}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := encodeReply(tt.id, tt.result)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
			if !json.Valid(got) {
				t.Fatalf("not valid JSON: %s", got)
			}
		})
	}
	if _, err := encodeReply("x", 5); err == nil {
		t.Fatal("a non-object result was accepted")
	}
}

func TestEncodeErrorFramesGolden(t *testing.T) {
	tests := []struct {
		name string
		got  []byte
		want string
	}{
		{"error reply", encodeErrorReply("f1", 403, "forbidden: not a member", 0),
			`{"id":"f1","code":403,"error":"forbidden: not a member"}`},
		{"unparsable frame", encodeErrorReply("", 400, "invalid request: body must be a JSON object", 0),
			`{"id":"","code":400,"error":"invalid request: body must be a JSON object"}`},
		{"rate limited", encodeErrorReply("f2", 429, "rate limited", 2),
			`{"id":"f2","code":429,"error":"rate limited","retry_after":2}`},
		{"error push", encodeErrorPush(410, "gone: cursor expired"),
			`{"op":"error","code":410,"error":"gone: cursor expired"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if string(tt.got) != tt.want {
				t.Fatalf("got  %s\nwant %s", tt.got, tt.want)
			}
		})
	}
}

// pushOf encodes the push of ev as the writer does for an event that has a body of its own.
func pushOf(ev protocol.SyncEvent) []byte {
	e := hub.EventOf(&ev)
	return appendEventPush(nil, &e)
}

// TestEncodeEventPushGolden holds push frames to the bytes the encoder gave before the body
// was encoded once per event (wanted strings captured from it), escapes included.
func TestEncodeEventPushGolden(t *testing.T) {
	for _, tt := range []struct {
		ev   protocol.SyncEvent
		want string
	}{
		{protocol.SyncEvent{Cursor: 12, Type: protocol.EventRead, ConvID: "c1", TS: 1700000000000, Data: json.RawMessage(`{"user_id":"bob","read_seq":5}`)},
			"{\"op\":\"event\",\"event\":{\"cursor\":12,\"type\":\"read\",\"conv_id\":\"c1\",\"ts\":1700000000000,\"data\":{\"user_id\":\"bob\",\"read_seq\":5}}}"},
		{protocol.SyncEvent{Cursor: 9007199254740991, Type: protocol.EventMessage, ConvID: "g_vqtax", TS: -1, Data: json.RawMessage(`{"seq":1,"content":"<b>&</b> \u2028"}`)},
			"{\"op\":\"event\",\"event\":{\"cursor\":9007199254740991,\"type\":\"message\",\"conv_id\":\"g_vqtax\",\"ts\":-1,\"data\":{\"seq\":1,\"content\":\"<b>&</b> \\u2028\"}}}"},
		{protocol.SyncEvent{Cursor: 0, Type: protocol.EventRecall},
			"{\"op\":\"event\",\"event\":{\"cursor\":0,\"type\":\"recall\",\"conv_id\":\"\",\"ts\":0,\"data\":null}}"},
		{protocol.SyncEvent{Cursor: -3, Type: "t\"<>&\u2028é", ConvID: "c\\\x01\xff", TS: 5, Data: json.RawMessage(`[]`)},
			"{\"op\":\"event\",\"event\":{\"cursor\":-3,\"type\":\"t\\\"\\u003c\\u003e\\u0026\\u2028é\",\"conv_id\":\"c\\\\\\u0001\\ufffd\",\"ts\":5,\"data\":[]}}"},
	} {
		if got := pushOf(tt.ev); string(got) != tt.want {
			t.Errorf("got  %s\nwant %s", got, tt.want)
		}
		if got := appendSyncEventPush([]byte("x"), &tt.ev); string(got) != "x"+tt.want {
			t.Errorf("appendSyncEventPush: got  %s\nwant x%s", got, tt.want)
		}
	}
}

// TestEncodeEventPushShared holds the pushes of a fanout, which share one body, each to the
// frame of an event of its own: only the cursor differs.
func TestEncodeEventPushShared(t *testing.T) {
	body := &hub.Body{Type: protocol.EventMessage, ConvID: "g_x", TS: 7, Data: json.RawMessage(`{"seq":3}`)}
	for _, cursor := range []int64{5, 1, 123456789, 5} {
		ev := hub.Event{Cursor: cursor, Body: body}
		got, want := appendEventPush([]byte("x"), &ev), pushOf(protocol.SyncEvent{Cursor: cursor, Type: body.Type, ConvID: body.ConvID, TS: body.TS, Data: body.Data})
		if string(got) != "x"+string(want) {
			t.Fatalf("cursor %d: got %s, want x%s", cursor, got, want)
		}
	}
}

func BenchmarkEncodeEventPush(b *testing.B) {
	ev := protocol.SyncEvent{Cursor: 12, Type: protocol.EventMessage, ConvID: "c1", TS: 1700000000000,
		Data: json.RawMessage(`{"conv_id":"c1","seq":5,"msg_id":"m","client_msg_id":"c","sender_id":"a","content_type":1,"content":{"text":"hello"},"extra":null,"created_at":1,"recalled":false}`)}
	for b.Loop() {
		pushOf(ev)
	}
}

// BenchmarkDecodeSendFrame measures the decode of the hottest client frame: the envelope
// and the send params.
func BenchmarkDecodeSendFrame(b *testing.B) {
	frame := []byte(`{"id":"42","op":"send","conv_id":"d_cqnezuscwz7if3puu6f3iggubi","client_msg_id":"0b1c2d3e-4f50-4617-8a9b-0c1d2e3f4a5b","content_type":1,"content":{"text":"hello, world"}}`)
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		f, err := decodeClientFrame(frame)
		if err != nil || f.Op != protocol.OpSend || f.paramsErr != nil {
			b.Fatal(f, err)
		}
	}
}

// BenchmarkDecodeSendBody measures the decode of a send body with a larger, nested content
// (a rich-text message of about 8 KiB), where the per-byte cost of the checks shows.
func BenchmarkDecodeSendBody(b *testing.B) {
	span := `{"type":"span","style":{"bold":true,"color":"#336699"},"text":"Grüße, ünïcödé and plain ASCII text"}`
	body := []byte(`{"conv_id":"d_cqnezuscwz7if3puu6f3iggubi","client_msg_id":"0b1c2d3e-4f50-4617-8a9b-0c1d2e3f4a5b","content_type":100,` +
		`"content":{"blocks":[` + strings.Repeat(span+",", 80) + span + `]},"extra":{"thread":"t1","reply_to":"m_abc"}}`)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := decodeSendRequest(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeAckReply measures the encode of the reply to a send.
func BenchmarkEncodeAckReply(b *testing.B) {
	ack := protocol.MessageAck{ConvID: "d_cqnezuscwz7if3puu6f3iggubi", ClientMsgID: "0b1c2d3e-4f50-4617-8a9b-0c1d2e3f4a5b",
		MsgID: "m_abthxvebofjygh73cxoqepd6w4", Seq: 1234, CreatedAt: 1795999091134}
	for b.Loop() {
		if _, err := encodeReply("42", ack); err != nil {
			b.Fatal(err)
		}
	}
}

// TestEncodeEventPushMatchesMarshal holds the hand-written encoder to json.Marshal: the same
// JSON value (json.Marshal also HTML-escapes inside the payload; both forms are valid).
func TestEncodeEventPushMatchesMarshal(t *testing.T) {
	for _, ev := range []protocol.SyncEvent{
		{Cursor: 1, Type: protocol.EventMessage, ConvID: "d_x", TS: 5, Data: json.RawMessage(`{"seq":1,"content":"<b>&</b>"}`)},
		{Cursor: 1 << 52, Type: protocol.EventConvDeleted, ConvID: "g_y", TS: 0, Data: json.RawMessage(`{"cleared_seq":3}`)},
		{Cursor: 2, Type: protocol.EventRecall, ConvID: "c", TS: -1},
	} {
		want, err := json.Marshal(protocol.PushFrame{Op: protocol.OpEvent, Event: &ev})
		if err != nil {
			t.Fatal(err)
		}
		got := pushOf(ev)
		var g, w any
		err = errors.Join(json.Unmarshal(got, &g), json.Unmarshal(want, &w))
		if err != nil || !reflect.DeepEqual(g, w) {
			t.Fatalf("appendEventPush = %s, %v\njson.Marshal    = %s", got, err, want)
		}
	}
}

// BenchmarkEncodeGroupPush measures the push frames of one group message to each of its
// recipients: the same message (one body, as chat publishes it), each with its own cursor.
func BenchmarkEncodeGroupPush(b *testing.B) {
	for _, n := range []int{1, 500} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			data := json.RawMessage(`{"conv_id":"g_vqtaxwm7dpudbb3ic2p3ozyqxe","seq":5,"msg_id":"m_abthxvebofjygh73cxoqepd6w4","client_msg_id":"0b1c2d3e-4f50-4617-8a9b-0c1d2e3f4a5b","sender_id":"alice","content_type":1,"content":{"text":"hello, world"},"extra":null,"created_at":1795999091134,"recalled":false}`)
			for b.Loop() {
				body := &hub.Body{Type: protocol.EventMessage, ConvID: "g_vqtaxwm7dpudbb3ic2p3ozyqxe", TS: 1795999091134, Data: data}
				for i := range n {
					ev := hub.Event{Cursor: int64(1000 + i), Body: body}
					appendEventPush(nil, &ev)
				}
			}
		})
	}
}

// TestAppendSyncResponse holds the GET /v1/sync body to json.Marshal's, for data the server
// encodes (json.Marshal output: compact, HTML characters escaped).
func TestAppendSyncResponse(t *testing.T) {
	data := func(v any) json.RawMessage {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, resp := range []protocol.SyncResponse{
		{Cursor: 4, Events: []protocol.SyncEvent{}},
		{Cursor: 4},
		{Cursor: 7, HasMore: true, Events: []protocol.SyncEvent{
			{Cursor: 5, Type: protocol.EventMessage, ConvID: "d_1", TS: 1795999222083,
				Data: data(protocol.Message{ConvID: "d_1", Seq: 1, Content: json.RawMessage(`{"text":"<b> & é \u2028"}`)})},
			{Cursor: 6, Type: protocol.EventMessage, ConvID: "d_1", TS: 2}, // its message is missing
			{Cursor: 7, Type: protocol.EventConvUpdated, ConvID: "g_1", TS: -1,
				Data: data(protocol.ConversationBrief{ConvID: "g_1", Name: "Team \"A\" <ops>"})},
		}},
		{Cursor: 9, Mark: 3, Events: []protocol.SyncEvent{}, Conversations: []protocol.ConversationBrief{
			{ConvID: "g_2", Type: protocol.TypeGroup, Name: "All <hands>", Fanout: protocol.FanoutRead, MaxSeq: 5, Unread: 2}}},
	} {
		want, err := json.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Events == nil { // the handler's empty list
			want = []byte(strings.Replace(string(want), `"events":null`, `"events":[]`, 1))
		}
		if got := appendSyncResponse([]byte("x"), &resp); string(got) != "x"+string(want) {
			t.Errorf("appendSyncResponse\n got x%s\nwant x%s", got[1:], want)
		}
	}
}

func BenchmarkEncodeSyncResponse(b *testing.B) {
	resp := protocol.SyncResponse{Cursor: 1000, HasMore: true}
	for i := range protocol.MaxSyncLimit {
		resp.Events = append(resp.Events, protocol.SyncEvent{Cursor: int64(i + 1), Type: protocol.EventMessage,
			ConvID: "d_cqnez5ab", TS: 1795999222115, Data: json.RawMessage(`{"conv_id":"d_cqnez5ab","seq":` +
				strconv.Itoa(i+1) + `,"msg_id":"m_evavb","client_msg_id":"alice-0005","sender_id":"alice","content_type":1,` +
				`"content":{"text":"hello, world"},"extra":null,"created_at":1795999222115,"recalled":false}`)})
	}
	b.Run("splice", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			appendSyncResponse(nil, &resp)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestAckReplyIsTheReflectiveOne: a send's reply, written without reflection, is byte for
// byte what encoding/json makes of it, for ids and values that need escaping too.
func TestAckReplyIsTheReflectiveOne(t *testing.T) {
	for _, id := range []string{"", "1", "a<b>&c", "quote\"back\\slash", "line\u2028sep", "é\x01"} {
		for _, dup := range []bool{false, true} {
			ack := protocol.MessageAck{ConvID: "d_<&>", ClientMsgID: "c-1_x", MsgID: "m_abc", Seq: 1 << 40, CreatedAt: -5, Duplicate: dup}
			checkAckReply(t, id, ack)
		}
	}
}

func FuzzAckReply(f *testing.F) {
	f.Add("1", "d_x", "c1", "m_1", int64(7), int64(1700000000000), false)
	f.Add("<\u2028>", "g\x00", "", "é", int64(-1), int64(0), true)
	f.Fuzz(func(t *testing.T, id, conv, client, msg string, seq, at int64, dup bool) {
		checkAckReply(t, id, protocol.MessageAck{ConvID: conv, ClientMsgID: client, MsgID: msg, Seq: seq, CreatedAt: at, Duplicate: dup})
	})
}

// checkAckReply fails t unless the fast reply to a send is encoding/json's, byte for byte.
func checkAckReply(t *testing.T, id string, ack protocol.MessageAck) {
	t.Helper()
	fast, err := encodeReply(id, ack)
	if err != nil {
		t.Fatal(err)
	}
	slow, err := encodeReplyReflect(id, ack)
	if err != nil {
		t.Fatal(err)
	}
	if string(fast) != string(slow) {
		t.Errorf("id %q, ack %+v:\n fast %s\n want %s", id, ack, fast, slow)
	}
}

package live

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/parleychat/parley/internal/bus"
	"github.com/parleychat/parley/internal/hub"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// TestBusMessageEncodesAgainWhatItChecked: the payload of a message from another node is
// taken only when every field holds, and is then this node's own encoding of those fields:
// the same bytes as the sender's for what a node sends, extra and mentions included.
func TestBusMessageEncodesAgainWhatItChecked(t *testing.T) {
	good := store.Message{ConvID: "g_abc", Seq: 7, MsgID: "m_x1", ClientMsgID: "c-1", SenderID: "bob", ContentType: 1,
		Content: []byte(`{"text":"<b>hi</b>"}`), CreatedAt: 1700000000000}
	withExtra := good
	withExtra.Extra, withExtra.Mentions = EncodeExtra(map[string]string{"k": "v\u2028"}), []string{"alice"}
	for name, m := range map[string]store.Message{"plain": good, "extra and mentions": withExtra} {
		payload, ok := AppendMessageJSON(nil, &m)
		if !ok {
			t.Fatal(name, "encode")
		}
		got, again, ok := busMessage(m.ConvID, payload)
		if !ok || !bytes.Equal(again, payload) || got.Seq != m.Seq || got.SenderID != m.SenderID {
			t.Fatalf("%s: busMessage(%s) = %s, %v; want the same bytes", name, payload, again, ok)
		}
	}

	payload, _ := AppendMessageJSON(nil, &good)
	p := string(payload)
	for name, data := range map[string]string{
		"another conversation": strings.Replace(p, `"g_abc"`, `"g_other"`, 1),
		"a frame":              `{"op":"message","message":` + p + `}`,
		"not an object":        `"` + p + `"`,
		"trailing bytes":       p + `,{"op":"revoked"}`,
		"a sender of no form":  strings.Replace(p, `"bob"`, `"bob\n"`, 1),
		"seq zero":             strings.Replace(p, `"seq":7`, `"seq":0`, 1),
		"seq beyond 2^53":      strings.Replace(p, `"seq":7`, `"seq":9007199254740992`, 1),
		"no content":           strings.Replace(p, `{"text":"\u003cb\u003ehi\u003c/b\u003e"}`, `null`, 1),
		"content type zero":    strings.Replace(p, `"content_type":1`, `"content_type":0`, 1),
		"a msg_id of no form":  strings.Replace(p, `"m_x1"`, `"m x1"`, 1),
		"too large":            strings.Replace(p, `"text":`, `"pad":"`+strings.Repeat("x", protocol.MaxFrameBytes)+`","text":`, 1),
	} {
		if _, _, ok := busMessage("g_abc", []byte(data)); ok {
			t.Errorf("%s: taken: %.200s", name, data)
		}
	}
}

// BenchmarkBusReceiveEvent measures what a node does with a message event from another
// node for one recipient (kindEvent: decode, check, encode again, publish to the hub), per
// message per recipient: "checked" is the node's path, "trusted" the same without the
// check and the encoding, as nodes did when they believed the bus.
func BenchmarkBusReceiveEvent(b *testing.B) {
	m := bus.NewMemory(bus.MemoryOptions{})
	defer m.Close()
	rec := &recordingBus{Bus: m}
	h := hub.New()
	c := testCluster(b, rec, h)
	msg := store.Message{ConvID: "g_abcdefghijklmnopqrstuvwxyz", Seq: 1234, MsgID: "m_abcdefghijklmnopqrstuvwxyz",
		ClientMsgID: "c-0001", SenderID: "bob", ContentType: 1, Content: []byte(`{"text":"hello there, how are you today?"}`),
		CreatedAt: 1_700_000_000_123}
	payload, _ := AppendMessageJSON(nil, &msg)
	c.Event("alice", 42, &hub.Body{Type: protocol.EventMessage, ConvID: msg.ConvID, TS: msg.CreatedAt, Data: payload})
	data := rec.published[0]
	c.node = "n_receiver" // the message is another node's
	sub := h.Watch("alice", 1<<20, func() {})
	defer sub.Close()
	var spare []*hub.Event

	b.Run("checked", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			c.onUser("alice", data)
			if i%1024 == 0 {
				spare = sub.Take(spare[:0])
			}
		}
	})
	b.Run("trusted", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			m, _ := c.decode(data)
			h.Publish("alice", []hub.Event{{Cursor: m.Cursor, Body: &hub.Body{Type: m.Type, ConvID: m.Conv, TS: m.TS, Data: m.Data}}})
			if i%1024 == 0 {
				spare = sub.Take(spare[:0])
			}
		}
	})
	if sub.Err() != nil {
		b.Fatal(sub.Err())
	}
}

// TestReadUserMsgAgreesWithDecode: the hand reader of wake-ups and message events reads what
// wake and event write as encoding/json does, and leaves anything laid out otherwise to it.
func TestReadUserMsgAgreesWithDecode(t *testing.T) {
	m := bus.NewMemory(bus.MemoryOptions{})
	defer m.Close()
	rec := &recordingBus{Bus: m}
	c := testCluster(t, rec, nil)
	c.Wake("alice", 1)
	c.Wake("alice", protocol.MaxSafeInteger)
	c.Event("alice", 42, &hub.Body{Type: protocol.EventMessage, ConvID: "g_x", TS: 1_700_000_000_123, Data: []byte(`{"conv_id":"g_x","seq":7}`)})
	for _, data := range rec.published {
		got, node, ok := readUserMsg(data)
		var want busMsg
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatal(err)
		}
		if !ok || string(node) != want.Node || got.Kind != want.Kind || got.Cursor != want.Cursor || got.TS != want.TS ||
			got.Type != want.Type || got.Conv != want.Conv || string(got.Data) != string(want.Data) {
			t.Fatalf("readUserMsg(%s) = %+v, %q, %v; want %+v", data, got, node, ok, want)
		}
	}
	for _, data := range []string{
		`{"n":"n_a","k":"w","c":1,"x":2}`,
		`{"n":"n_a","k":"w","c":01}`,
		`{"n":"n_a","k":"w","c":9007199254740992}`,
		`{"n":"n_a","k":"v","c":1,"ts":1,"t":"conv_updated","cv":"g_x","d":{}}`,
		`{"n":"n_a","k":"v","c":1,"ts":1,"t":"message","cv":"g\"x","d":{}}`,
		`{"n":"n\u0061","k":"w","c":1}`,
		`{"n":"n_a","k":"e","t":"receipts"}`,
	} {
		if _, _, ok := readUserMsg([]byte(data)); ok {
			t.Errorf("readUserMsg took %s", data)
		}
	}
}

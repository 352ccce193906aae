package protocol_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/parleychat/parley/protocol"
)

// Events as the server sends them (section 8.1).
const (
	messageEvent  = `{"cursor":6,"type":"message","conv_id":"d_c","ts":1,"data":{"conv_id":"d_c","seq":1,"msg_id":"m_1","client_msg_id":"a-1","sender_id":"alice","content_type":1,"content":{"text":"hi Bob"},"extra":null,"created_at":1,"recalled":false}}`
	recalledEvent = `{"cursor":12,"type":"message","conv_id":"d_c","ts":1,"data":{"conv_id":"d_c","seq":7,"msg_id":"m_7","client_msg_id":"a-5","sender_id":"alice","content_type":1,"content":null,"extra":null,"created_at":1,"recalled":true}}`
	readEvent     = `{"cursor":14,"type":"read","conv_id":"d_c","ts":1,"data":{"user_id":"bob","read_seq":6}}`
	updatedEvent  = `{"cursor":1,"type":"conv_updated","conv_id":"g_t","ts":1,"data":{"type":"group","name":"Team","members_count":3}}`
)

func event(t *testing.T, s string) protocol.SyncEvent {
	t.Helper()
	var ev protocol.SyncEvent
	if err := json.Unmarshal([]byte(s), &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

func TestEventAccessors(t *testing.T) {
	m, err := event(t, messageEvent).Message()
	if err != nil || m.Seq != 1 || m.SenderID != "alice" {
		t.Fatalf("Message() = %+v, %v", m, err)
	}
	r, err := event(t, readEvent).Read()
	if err != nil || r != (protocol.ReadData{UserID: "bob", ReadSeq: 6}) {
		t.Fatalf("Read() = %+v, %v", r, err)
	}
	b, err := event(t, updatedEvent).ConvUpdated()
	if err != nil || b.ConvID != "g_t" || b.Name != "Team" {
		t.Fatalf("ConvUpdated() = %+v, %v (conv_id comes from the event when data lacks it)", b, err)
	}
}

func TestEventAccessorRefusesAnotherType(t *testing.T) {
	ev := event(t, readEvent)
	if _, err := ev.Message(); !errors.Is(err, protocol.ErrEventType) {
		t.Fatalf("Message() of a read event: err = %v, want ErrEventType", err)
	}
	if _, err := ev.Recall(); !errors.Is(err, protocol.ErrEventType) {
		t.Fatalf("Recall() of a read event: err = %v, want ErrEventType", err)
	}
}

func TestEventAccessorReportsBadData(t *testing.T) {
	ev := protocol.SyncEvent{Cursor: 3, Type: protocol.EventDelivered, Data: json.RawMessage(`{"delivered_seq":"x"}`)}
	_, err := ev.Delivered()
	if err == nil || errors.Is(err, protocol.ErrEventType) {
		t.Fatalf("Delivered() of undecodable data: err = %v, want a decode error", err)
	}
}

func TestMessageText(t *testing.T) {
	recalled, err := event(t, recalledEvent).Message()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		m    protocol.Message
		text string
		ok   bool
	}{
		{"text", protocol.Message{ContentType: protocol.ContentText, Content: json.RawMessage(`{"text":"hi"}`)}, "hi", true},
		{"text with other fields", protocol.Message{ContentType: protocol.ContentText, Content: json.RawMessage(`{"text":"hi","t":5}`)}, "hi", true},
		{"recalled", recalled, "", false},
		{"image", protocol.Message{ContentType: protocol.ContentImage, Content: json.RawMessage(`{"text":"hi"}`)}, "", false},
		{"a bare string", protocol.Message{ContentType: protocol.ContentText, Content: json.RawMessage(`"hi"`)}, "", false},
		{"null", protocol.Message{ContentType: protocol.ContentText, Content: json.RawMessage(`null`)}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text, ok := tc.m.Text()
			if text != tc.text || ok != tc.ok {
				t.Fatalf("Text() = %q, %v; want %q, %v", text, ok, tc.text, tc.ok)
			}
		})
	}
}

// A client's event handler: switch on the type, then read the typed data.
func ExampleSyncEvent_Message() {
	var ev protocol.SyncEvent
	_ = json.Unmarshal([]byte(messageEvent), &ev)
	switch ev.Type {
	case protocol.EventMessage:
		m, err := ev.Message()
		if err != nil {
			fmt.Println(err)
			return
		}
		if text, ok := m.Text(); ok {
			fmt.Printf("%s (seq %d): %s\n", m.SenderID, m.Seq, text)
		}
	case protocol.EventRead:
		r, _ := ev.Read()
		fmt.Printf("%s read up to %d\n", r.UserID, r.ReadSeq)
	}
	// Output: alice (seq 1): hi Bob
}

// The content of a text message, as every client sends it.
func ExampleTextContent() {
	content, _ := json.Marshal(protocol.TextContent{Text: "hi Bob"})
	req := protocol.SendRequest{ConvID: "d_c", ClientMsgID: "alice-0001", ContentType: protocol.ContentText, Content: content}
	body, _ := json.Marshal(req)
	fmt.Println(string(body))
	// Output: {"conv_id":"d_c","client_msg_id":"alice-0001","content_type":1,"content":{"text":"hi Bob"}}
}

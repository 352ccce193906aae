package client

import (
	"encoding/json"
	"reflect"
	"testing"
)

func recallEvent(cursor int64, conv string, seq int64, sender string) SyncEvent {
	data, _ := json.Marshal(RecallData{Seq: seq, MsgID: "m", SenderID: sender})
	return SyncEvent{Cursor: cursor, Type: EventRecall, ConvID: conv, Data: data}
}

func deletedEvent(cursor int64, conv string, cleared int64) SyncEvent {
	data, _ := json.Marshal(ConvDeletedData{ClearedSeq: cleared})
	return SyncEvent{Cursor: cursor, Type: EventConvDeleted, ConvID: conv, Data: data}
}

func updatedEvent(cursor int64, b ConversationBrief) SyncEvent {
	data, _ := json.Marshal(b)
	return SyncEvent{Cursor: cursor, Type: EventConvUpdated, ConvID: b.ConvID, Data: data}
}

func seqs(msgs []Message) []int64 {
	out := []int64{}
	for _, m := range msgs {
		out = append(out, m.Seq)
	}
	return out
}

func TestInboxMergeIsIdempotent(t *testing.T) {
	in := NewInbox()
	ev := msgEvent(1, "c1", 1, "bob")
	in.Apply(ev)
	before := in.Messages("c1")
	in.Apply(ev)
	in.Merge(before...)
	other := before[0]
	other.Content = json.RawMessage(`"a different copy"`)
	in.Merge(other)
	if after := in.Messages("c1"); !reflect.DeepEqual(before, after) {
		t.Fatalf("repeats changed the inbox:\nbefore %+v\nafter  %+v", before, after)
	}
	if got := in.ReadSeq("c1", "bob"); got != 1 {
		t.Errorf("sender's read position %d, want 1 (sending implies reading)", got)
	}
}

func TestInboxOrdersBySeq(t *testing.T) {
	in := NewInbox()
	for _, seq := range []int64{3, 1, 2, 5} {
		in.Apply(msgEvent(seq, "c1", seq, "bob"))
	}
	if got := seqs(in.Messages("c1")); !reflect.DeepEqual(got, []int64{1, 2, 3, 5}) {
		t.Fatalf("seqs %v, want ascending", got)
	}
}

func TestInboxRecall(t *testing.T) {
	tests := []struct {
		name   string
		events []SyncEvent
	}{
		{name: "recall after message", events: []SyncEvent{msgEvent(1, "c1", 1, "bob"), recallEvent(2, "c1", 1, "bob")}},
		{name: "message repeated after recall", events: []SyncEvent{
			msgEvent(1, "c1", 1, "bob"), recallEvent(2, "c1", 1, "bob"), msgEvent(1, "c1", 1, "bob"),
		}},
		{name: "recall before message", events: []SyncEvent{recallEvent(2, "c1", 1, "bob"), msgEvent(1, "c1", 1, "bob")}},
		{name: "recall twice", events: []SyncEvent{
			msgEvent(1, "c1", 1, "bob"), recallEvent(2, "c1", 1, "bob"), recallEvent(3, "c1", 1, "bob"),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := NewInbox()
			for _, ev := range tt.events {
				in.Apply(ev)
			}
			m, ok := in.Message("c1", 1)
			if !ok {
				t.Fatal("message missing")
			}
			if !m.Recalled || m.Content != nil || m.Extra != nil {
				t.Errorf("got %+v, want recalled with content and extra null", m)
			}
			if m.SenderID != "bob" {
				t.Errorf("sender %q, want it kept", m.SenderID)
			}
			if len(tt.events) > 1 && tt.events[len(tt.events)-1].Type == EventMessage && m.ClientMsgID != "cm1" {
				t.Errorf("client_msg_id %q: the late message should fill in the placeholder", m.ClientMsgID)
			}
		})
	}
}

func TestInboxDeletionHidesClearedSeqs(t *testing.T) {
	in := NewInbox()
	for seq := int64(1); seq <= 3; seq++ {
		in.Apply(msgEvent(seq, "c1", seq, "bob"))
	}
	in.Apply(deletedEvent(4, "c1", 2))
	in.Apply(msgEvent(1, "c1", 1, "bob")) // a stale repeat stays hidden
	in.Apply(msgEvent(5, "c1", 4, "bob"))
	if got := seqs(in.Messages("c1")); !reflect.DeepEqual(got, []int64{3, 4}) {
		t.Fatalf("seqs %v, want [3 4]", got)
	}
	in.Apply(deletedEvent(6, "c1", 1)) // an older clear changes nothing
	if got := seqs(in.Messages("c1")); !reflect.DeepEqual(got, []int64{3, 4}) {
		t.Fatalf("seqs %v after an older clear, want [3 4]", got)
	}
}

// TestInboxDropsRemovedConversation: the conv_updated a user gets on leaving or being
// removed says so, and the Inbox forgets the conversation; being added again brings it back.
func TestInboxDropsRemovedConversation(t *testing.T) {
	in := NewInbox()
	in.Apply(updatedEvent(1, ConversationBrief{ConvID: "g1", Type: "group", MembersCount: 3}))
	in.Apply(msgEvent(2, "g1", 1, "bob"))
	in.Apply(updatedEvent(3, ConversationBrief{ConvID: "g1", Type: "group", MembersCount: 2, MaxSeq: 1, Removed: true}))
	if _, ok := in.Conversation("g1"); ok || len(in.Messages("g1")) != 0 || len(in.ConversationIDs()) != 0 {
		t.Fatalf("after removal the Inbox still holds g1: %v", in.ConversationIDs())
	}
	in.Apply(updatedEvent(4, ConversationBrief{ConvID: "g1", Type: "group", MembersCount: 3, MaxSeq: 1}))
	if b, ok := in.Conversation("g1"); !ok || b.Removed {
		t.Fatalf("added again: %+v %v", b, ok)
	}
}

func TestInboxReset(t *testing.T) {
	in := NewInbox()
	in.Apply(msgEvent(1, "old", 1, "bob"))
	var m Message
	_ = json.Unmarshal(msgEvent(9, "c1", 7, "bob").Data, &m)
	in.Reset(SyncSnapshot{
		Cursor:        9,
		Conversations: []ConversationBrief{{ConvID: "c1", Type: "direct", MaxSeq: 7, ClearedSeq: 5}},
		Messages:      map[string][]Message{"c1": {m}},
		ReadPositions: map[string]map[string]int64{"c1": {"bob": 7, "alice": 6}},
	})
	if got := in.ConversationIDs(); !reflect.DeepEqual(got, []string{"c1"}) {
		t.Errorf("conversations %v, want only the snapshot's", got)
	}
	if got := seqs(in.Messages("c1")); !reflect.DeepEqual(got, []int64{7}) {
		t.Errorf("seqs %v, want [7]", got)
	}
	if b, ok := in.Conversation("c1"); !ok || b.MaxSeq != 7 {
		t.Errorf("brief %+v %v", b, ok)
	}
	if got := in.ReadSeq("c1", "alice"); got != 6 {
		t.Errorf("alice read %d, want 6", got)
	}
	in.Merge(Message{ConvID: "c1", Seq: 4}) // below cleared_seq
	if got := seqs(in.Messages("c1")); !reflect.DeepEqual(got, []int64{7}) {
		t.Errorf("seqs %v after merging a cleared seq, want [7]", got)
	}
}

package store_test

import (
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/parleychat/parley/internal/store"
)

// The append rule is tested here on its own, row by row; the conformance suite
// (storetest) checks that every backend loads and saves what it decides.

func TestDecideAppendDuplicate(t *testing.T) {
	orig := store.Message{ConvID: "c", Seq: 7, SenderID: "a", ClientMsgID: "m1"}
	var p store.AppendPlan
	err := store.DecideAppend(store.Message{ConvID: "other", SenderID: "a", ClientMsgID: "m1"}, &store.AppendView{Original: &orig}, &p)
	if err != nil || !p.Duplicate || !reflect.DeepEqual(p.Message, orig) || p.Events != nil || len(p.After) != 0 {
		t.Fatalf("duplicate: %+v, %v; want the original, nothing to write", p, err)
	}
}

func TestDecideAppendRefusals(t *testing.T) {
	c := store.Conversation{ID: "c", MaxSeq: 3}
	sender := store.Member{ConvID: "c", UserID: "a"}
	for name, v := range map[string]store.AppendView{
		"no conversation": {},
		"not a member":    {Conv: &c},
	} {
		var p store.AppendPlan
		if err := store.DecideAppend(store.Message{ConvID: "c", SenderID: "a"}, &v, &p); !errors.Is(err, store.ErrNotMember) || !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: %v, want ErrNotMember (an ErrNotFound)", name, err)
		}
	}
	var p store.AppendPlan
	v := store.AppendView{Conv: &c, Sender: &sender, Members: []store.Member{sender}}
	if err := store.DecideAppend(store.Message{ConvID: "c", SenderID: "a"}, &v, &p); err == nil {
		t.Error("a view without the logs of its events was accepted")
	}
}

func TestDecideAppendWriteFanout(t *testing.T) {
	c := store.Conversation{ID: "c", MaxSeq: 3, UpdatedAt: 500}
	members := []store.Member{
		{ConvID: "c", UserID: "a", ReadSeq: 2, DeliveredSeq: 3},
		{ConvID: "c", UserID: "b", ReadSeq: 1, Hidden: true},
		{ConvID: "c", UserID: "d", ReadSeq: 3},
	}
	v := store.AppendView{Conv: &c, Sender: &members[0], Members: members, Logs: []int64{10, 0, 41}}
	m := store.Message{ConvID: "c", SenderID: "a", ClientMsgID: "m", Seq: 99, CreatedAt: 400}
	var p store.AppendPlan
	if err := store.DecideAppend(m, &v, &p); err != nil {
		t.Fatal(err)
	}
	if p.Message.Seq != 4 || p.Conv.MaxSeq != 4 || p.Conv.UpdatedAt != 500 || p.ReadFanout {
		t.Errorf("seq %d, conversation %+v: want seq 4 = max_seq, activity kept at 500 (later than the message)", p.Message.Seq, p.Conv)
	}
	if p.Message.CreatedAt != 500 {
		t.Errorf("message created at %d: want raised to the conversation's latest activity, 500, so that no message is older than the one before", p.Message.CreatedAt)
	}
	want := []store.Delivery{{UserID: "a", Cursor: 11}, {UserID: "b", Cursor: 1}, {UserID: "d", Cursor: 42}}
	if !slices.Equal(p.Events, want) {
		t.Errorf("events %v, want %v", p.Events, want)
	}
	if a := p.After[0]; a.ReadSeq != 4 || a.DeliveredSeq != 4 || !p.Changed[0] {
		t.Errorf("sender after %+v (changed %v): want read and delivered 4", a, p.Changed[0])
	}
	if b := p.After[1]; b.Hidden || b.ReadSeq != 1 || !p.Changed[1] {
		t.Errorf("hidden member after %+v (changed %v): want shown again, positions kept", b, p.Changed[1])
	}
	if p.After[2] != members[2] || p.Changed[2] {
		t.Errorf("other member after %+v (changed %v): want unchanged", p.After[2], p.Changed[2])
	}
	if ev := p.Event(p.Events[2]); !reflect.DeepEqual(ev, store.Event{UserID: "d", Cursor: 42, Type: store.EventMessage, ConvID: "c", TS: 500, Seq: 4}) {
		t.Errorf("event %+v", ev)
	}
	if members[1].Hidden != true || c.MaxSeq != 3 {
		t.Error("DecideAppend changed the view it was given")
	}
}

func TestDecideAppendReadFanout(t *testing.T) {
	c := store.Conversation{ID: "g", MaxSeq: 9, ReadFrom: 1, Mark: 5}
	sender := store.Member{ConvID: "g", UserID: "a", ReadSeq: 9, DeliveredSeq: 9}
	v := store.AppendView{Conv: &c, Sender: &sender, Mentioned: []string{"x", "y"}, Logs: []int64{3, 8}, LastMark: 70,
		Members: []store.Member{{UserID: "ignored"}}}
	m := store.Message{ConvID: "g", SenderID: "a", CreatedAt: 1000, Mentions: []string{"x", "nobody", "y"}}
	var p store.AppendPlan
	if err := store.DecideAppend(m, &v, &p); err != nil {
		t.Fatal(err)
	}
	if p.Message.Seq != 10 || p.Conv.Mark != 71 || p.Conv.UpdatedAt != 1000 || !p.ReadFanout {
		t.Errorf("seq %d, conversation %+v: want seq 10, the next mark 71", p.Message.Seq, p.Conv)
	}
	if want := []store.Delivery{{UserID: "x", Cursor: 4}, {UserID: "y", Cursor: 9}}; !slices.Equal(p.Events, want) {
		t.Errorf("events %v, want the mentioned members' only: %v", p.Events, want)
	}
	if len(p.After) != 1 || p.After[0].ReadSeq != 10 || !p.Changed[0] {
		t.Errorf("rows after %+v: want the sender's alone, read up to 10", p.After)
	}
	// The plan's buffers are reused: a second decision leaves nothing of the first.
	v2 := store.AppendView{Conv: &c, Sender: &sender, LastMark: 71}
	if err := store.DecideAppend(m, &v2, &p); err != nil {
		t.Fatal(err)
	}
	if p.Events != nil || len(p.After) != 1 || p.Conv.Mark != 72 {
		t.Errorf("second plan %+v", p)
	}
}

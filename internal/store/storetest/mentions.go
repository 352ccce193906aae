package storetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/parleychat/parley/internal/store"
)

// mentionsFixture stores users alice, bob, carol, dave and erin, the write-fanout
// conversation "w" and the read-fanout conversation "r" (read fanout from seq 1), both with
// alice, bob, carol and dave as members (alice first). erin is in neither.
func mentionsFixture(t testing.TB, s store.Store) {
	t.Helper()
	createUsers(t, s, "alice", "bob", "carol", "dave", "erin")
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for _, id := range []string{"w", "r"} {
			c := newConversation(id)
			c.MaxSeq, c.MembersCount = 0, 4
			if id == "r" {
				c.ReadFrom = 1
			}
			if err := tx.CreateConversation(ctx, c); err != nil {
				return err
			}
			for i, u := range []string{"alice", "bob", "carol", "dave"} {
				if err := tx.PutMember(ctx, store.Member{ConvID: id, UserID: u, Ordinal: int64(i + 1), JoinedAt: 1}); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// mentioning returns a message to append that mentions users.
func mentioning(convID, sender, clientID string, users ...string) store.Message {
	m := newAppend(convID, sender, clientID)
	m.Mentions = users
	return m
}

// lastCursors returns each user's last cursor.
func lastCursors(t testing.TB, s store.Store, users ...string) map[string]int64 {
	t.Helper()
	out := make(map[string]int64)
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		for _, u := range users {
			b, err := tx.Cursors(ctx, u)
			if err != nil {
				return err
			}
			out[u] = b.Last
		}
		return nil
	})
	return out
}

// testMessageMentions holds every read of a message to its mentions: stored as given,
// read back by Message, MessageByClientID, Messages and the message of a "message" event,
// nil when there are none, and kept by a recall.
func testMessageMentions(t *testing.T, s store.Store) {
	createUsers(t, s, "alice", "bob")
	with := newMessage("c1", 1, "alice")
	with.Mentions = []string{"bob", "nobody", "alice"}
	without := newMessage("c1", 2, "alice")
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		if err := tx.InsertMessage(ctx, with); err != nil {
			return err
		}
		if err := tx.InsertMessage(ctx, without); err != nil {
			return err
		}
		for _, seq := range []int64{1, 2} {
			if _, err := tx.AppendEvent(ctx, store.Event{UserID: "bob", Type: store.EventMessage, ConvID: "c1", TS: 1, Seq: seq}); err != nil {
				return err
			}
		}
		return nil
	})
	want := func(what string, got []string, m store.Message) {
		t.Helper()
		if !slices.Equal(got, m.Mentions) || (m.Mentions == nil) != (got == nil) {
			t.Errorf("%s: mentions %q, want %q", what, got, m.Mentions)
		}
	}
	check := func(stage string, with store.Message) {
		t.Helper()
		view(t, s, func(ctx context.Context, tx store.ReadTx) error {
			for _, m := range []store.Message{with, without} {
				got, err := tx.Message(ctx, "c1", m.Seq)
				if err != nil {
					return err
				}
				want(fmt.Sprintf("%s: Message %d", stage, m.Seq), got.Mentions, m)
				if got, err = tx.MessageByClientID(ctx, m.SenderID, m.ClientMsgID); err != nil {
					return err
				}
				want(fmt.Sprintf("%s: MessageByClientID %d", stage, m.Seq), got.Mentions, m)
			}
			ms, err := tx.Messages(ctx, "c1", store.MessageRange{Limit: 10})
			if err != nil || len(ms) != 2 {
				t.Fatalf("%s: Messages = %d, %v; want 2", stage, len(ms), err)
			}
			want(stage+": Messages[0]", ms[0].Mentions, with)
			want(stage+": Messages[1]", ms[1].Mentions, without)
			if ms, err = tx.Messages(ctx, "c1", store.MessageRange{BeforeSeq: 3, Limit: 10}); err != nil || len(ms) != 2 {
				t.Fatalf("%s: Messages before = %d, %v; want 2", stage, len(ms), err)
			}
			want(stage+": Messages before [0]", ms[0].Mentions, with)
			evs, err := tx.Events(ctx, "bob", 0, 10)
			if err != nil || len(evs) != 2 || evs[0].Message == nil || evs[1].Message == nil {
				t.Fatalf("%s: Events = %+v, %v; want two with messages", stage, evs, err)
			}
			want(stage+": event 1's message", evs[0].Message.Mentions, with)
			want(stage+": event 2's message", evs[1].Message.Mentions, without)
			return nil
		})
	}
	check("inserted", with)
	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.RecallMessage(ctx, "c1", 1, 1_700_000_009_000) })
	check("recalled", with)
}

// testAppendMentionsReadFanout holds AppendMessage to its mentions in a read-fanout
// conversation: each mentioned member but the sender, once however often mentioned, gets
// the message as an event under their next cursor (gapless, after events of Updates),
// returned in Events in the order of the mentions; the sender, members not mentioned and
// mentioned non-members get nothing, and no member row but the sender's changes; a retry
// returns the original with its mentions and writes nothing; all of it survives a reopen.
func testAppendMentionsReadFanout(t *testing.T, h Harness) {
	dir := t.TempDir()
	s := h.Open(t, Config{Dir: dir})
	mentionsFixture(t, s)
	everyone := []string{"alice", "bob", "carol", "dave", "erin"}
	update(t, s, func(ctx context.Context, tx store.Tx) error { // bob's log has an event already
		_, err := tx.AppendEvent(ctx, store.Event{UserID: "bob", Type: "read", ConvID: "r", TS: 1, Data: []byte(`{}`)})
		return err
	})
	before := lastCursors(t, s, everyone...)
	mustAppend(t, s, newAppend("r", "carol", "plain")) // no mentions: no event
	m1 := mentioning("r", "alice", "m1", "dave", "erin", "alice", "bob", "dave", "nobody")
	res := mustAppend(t, s, m1)
	if !res.ReadFanout || res.Duplicate || res.Message.Seq != 2 || !slices.Equal(res.Message.Mentions, m1.Mentions) {
		t.Errorf("append = %+v, want seq 2 in read fanout with the mentions as given", res)
	}
	wantDeliveries(t, "mentions", res, store.Delivery{UserID: "dave", Cursor: before["dave"] + 1},
		store.Delivery{UserID: "bob", Cursor: before["bob"] + 1})
	update(t, s, func(ctx context.Context, tx store.Tx) error { // an Update between two appends
		_, err := tx.AppendEvent(ctx, store.Event{UserID: "dave", Type: "read", ConvID: "r", TS: 2, Data: []byte(`{}`)})
		return err
	})
	res2 := mustAppend(t, s, mentioning("r", "bob", "m2", "dave", "bob"))
	wantDeliveries(t, "second mention of dave", res2, store.Delivery{UserID: "dave", Cursor: before["dave"] + 3})

	check := func(stage string) {
		t.Helper()
		after := lastCursors(t, s, everyone...)
		wantLast := map[string]int64{"alice": before["alice"], "bob": before["bob"] + 1, "carol": before["carol"],
			"dave": before["dave"] + 3, "erin": before["erin"]}
		for _, u := range everyone {
			if after[u] != wantLast[u] {
				t.Errorf("%s: %s's last cursor %d, want %d", stage, u, after[u], wantLast[u])
			}
		}
		view(t, s, func(ctx context.Context, tx store.ReadTx) error {
			evs, err := tx.Events(ctx, "bob", before["bob"], 10)
			if err != nil || len(evs) != 1 {
				t.Fatalf("%s: bob's new events = %+v, %v; want one", stage, evs, err)
			}
			if e := evs[0]; e.Type != store.EventMessage || e.ConvID != "r" || e.Seq != 2 || e.TS != m1.CreatedAt ||
				e.Message == nil || e.Message.MsgID != m1.MsgID || !slices.Equal(e.Message.Mentions, m1.Mentions) {
				t.Errorf("%s: bob's event = %+v, want message 2 with its mentions", stage, e)
			}
			evs, err = tx.Events(ctx, "dave", before["dave"], 10)
			if err != nil || len(evs) != 3 || evs[0].Seq != 2 || evs[1].Type != "read" || evs[2].Seq != 3 {
				t.Errorf("%s: dave's new events = %+v, %v; want message 2, read, message 3", stage, evs, err)
			}
			for i, e := range evs {
				if e.Cursor != before["dave"]+int64(i)+1 {
					t.Errorf("%s: dave's event %d has cursor %d, want %d", stage, i, e.Cursor, before["dave"]+int64(i)+1)
				}
			}
			ms, err := tx.Members(ctx, "r")
			if err != nil {
				return err
			}
			for _, m := range ms { // bob read up to his own message 3, alice up to 2
				want := map[string]int64{"alice": 2, "bob": 3, "carol": 1, "dave": 0}[m.UserID]
				if m.ReadSeq != want || m.DeliveredSeq != want || m.Hidden {
					t.Errorf("%s: member %+v, want read and delivered %d", stage, m, want)
				}
			}
			return nil
		})
	}
	check("after the appends")
	dup := mustAppend(t, s, mentioning("r", "alice", "m1", "carol"))
	if !dup.Duplicate || dup.Events != nil || dup.Message.Seq != 2 || !slices.Equal(dup.Message.Mentions, m1.Mentions) {
		t.Errorf("retry = %+v, want the original seq 2 with its mentions and no events", dup)
	}
	check("after a retry")
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s = h.Open(t, Config{Dir: dir})
	check("after a reopen")
	if dup := mustAppend(t, s, m1); !dup.Duplicate || !slices.Equal(dup.Message.Mentions, m1.Mentions) {
		t.Errorf("retry after a reopen = %+v, want the original with its mentions", dup)
	}
	res = mustAppend(t, s, mentioning("r", "carol", "m3", "bob"))
	wantDeliveries(t, "after a reopen", res, store.Delivery{UserID: "bob", Cursor: before["bob"] + 2})
}

// testAppendMentionsWriteFanout: in a write-fanout conversation every member gets the
// message's event anyway, so mentions change nothing but the stored message: one event per
// member, in Members order, none for a mentioned non-member.
func testAppendMentionsWriteFanout(t *testing.T, s store.Store) {
	mentionsFixture(t, s)
	members := []string{"alice", "bob", "carol", "dave"}
	before := lastCursors(t, s, append(members, "erin")...)
	m := mentioning("w", "alice", "w1", "bob", "erin", "bob", "alice")
	res := mustAppend(t, s, m)
	if res.ReadFanout || !slices.Equal(res.Message.Mentions, m.Mentions) {
		t.Errorf("append = %+v, want write fanout with the mentions as given", res)
	}
	var want []store.Delivery
	for _, u := range members {
		want = append(want, store.Delivery{UserID: u, Cursor: before[u] + 1})
	}
	wantDeliveries(t, "write fanout with mentions", res, want...)
	if after := lastCursors(t, s, "erin"); after["erin"] != before["erin"] {
		t.Errorf("erin, not a member, has last cursor %d, want %d", after["erin"], before["erin"])
	}
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		evs, err := tx.Events(ctx, "bob", before["bob"], 10)
		if err != nil || len(evs) != 1 || evs[0].Message == nil || !slices.Equal(evs[0].Message.Mentions, m.Mentions) {
			t.Errorf("bob's events = %+v, %v; want the one message with its mentions", evs, err)
		}
		return nil
	})
}

// testAppendMentionsConcurrent: concurrent appends to a read-fanout conversation, each
// mentioning bob, give bob one event each, with gapless cursors, whatever batches they
// share.
func testAppendMentionsConcurrent(t *testing.T, s store.Store) {
	mentionsFixture(t, s)
	before := lastCursors(t, s, "bob")["bob"]
	const n = 24
	var wg sync.WaitGroup
	got := make([]store.Appended, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sender := []string{"alice", "carol", "dave"}[i%3]
			got[i], errs[i] = s.AppendMessage(t.Context(), mentioning("r", sender, fmt.Sprint("c", i), "bob", "erin"))
		}()
	}
	wg.Wait()
	var cursors []int64
	for i, res := range got {
		if errs[i] != nil {
			t.Fatalf("append %d: %v", i, errs[i])
		}
		if len(res.Events) != 1 || res.Events[0].UserID != "bob" {
			t.Fatalf("append %d events = %+v, want one for bob", i, res.Events)
		}
		cursors = append(cursors, res.Events[0].Cursor)
	}
	slices.Sort(cursors)
	for i, c := range cursors {
		if c != before+int64(i)+1 {
			t.Fatalf("bob's cursors %v, want %d..%d", cursors, before+1, before+n)
		}
	}
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		evs, err := tx.Events(ctx, "bob", before, 2*n)
		if err != nil || len(evs) != n {
			t.Fatalf("bob's events = %d, %v; want %d", len(evs), err, n)
		}
		seqs := make(map[int64]bool)
		for _, e := range evs {
			if e.Type != store.EventMessage || e.Message == nil || seqs[e.Seq] {
				t.Errorf("bob's event %+v: want a message once", e)
			}
			seqs[e.Seq] = true
		}
		return nil
	})
}

package storetest

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/parleychat/parley/internal/store"
)

// appendFixture stores users alice, bob and carol and conversation "c1" with alice and bob
// as members (alice first).
func appendFixture(t testing.TB, s store.Store) {
	t.Helper()
	createUsers(t, s, "alice", "bob", "carol")
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		c := newConversation("c1")
		c.MaxSeq = 0
		if err := tx.CreateConversation(ctx, c); err != nil {
			return err
		}
		for i, u := range []string{"alice", "bob"} {
			if err := tx.PutMember(ctx, store.Member{ConvID: "c1", UserID: u, Ordinal: int64(i + 1), JoinedAt: 1}); err != nil {
				return err
			}
		}
		return nil
	})
}

// newAppend returns a message to append: no Seq, a fresh client id.
func newAppend(convID, sender, clientID string) store.Message {
	m := newMessage(convID, 0, sender)
	m.MsgID, m.ClientMsgID = "msg-"+sender+"-"+clientID, clientID
	return m
}

// mustAppend appends m and fails the test on error.
func mustAppend(t testing.TB, s store.Store, m store.Message) store.Appended {
	t.Helper()
	res, err := s.AppendMessage(t.Context(), m)
	if err != nil {
		t.Fatalf("AppendMessage(%s by %s): %v", m.ClientMsgID, m.SenderID, err)
	}
	return res
}

// wantDeliveries fails the test unless res appended exactly want.
func wantDeliveries(t testing.TB, what string, res store.Appended, want ...store.Delivery) {
	t.Helper()
	if !slices.Equal(res.Events, want) {
		t.Errorf("%s: events %+v, want %+v", what, res.Events, want)
	}
}

func testAppendAssigns(t *testing.T, s store.Store) {
	appendFixture(t, s)
	update(t, s, func(ctx context.Context, tx store.Tx) error { // bob hid the conversation
		m, err := tx.Member(ctx, "c1", "bob")
		m.Hidden = true
		if err == nil {
			err = tx.PutMember(ctx, m)
		}
		return err
	})
	first := newAppend("c1", "alice", "a1")
	res := mustAppend(t, s, first)
	first.Seq = 1
	if res.Duplicate || !reflect.DeepEqual(res.Message, first) {
		t.Errorf("first append = %+v, want message %+v", res, first)
	}
	wantDeliveries(t, "first append", res, store.Delivery{UserID: "alice", Cursor: 1}, store.Delivery{UserID: "bob", Cursor: 1})
	second := newAppend("c1", "bob", "b1")
	second.CreatedAt = first.CreatedAt + 5
	res = mustAppend(t, s, second)
	if res.Message.Seq != 2 {
		t.Errorf("second append seq %d, want 2", res.Message.Seq)
	}
	wantDeliveries(t, "second append", res, store.Delivery{UserID: "alice", Cursor: 2}, store.Delivery{UserID: "bob", Cursor: 2})

	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		c, err := tx.Conversation(ctx, "c1")
		if err != nil || c.MaxSeq != 2 || c.UpdatedAt != second.CreatedAt {
			t.Errorf("conversation after two appends = %+v, %v; want MaxSeq 2, UpdatedAt %d", c, err, second.CreatedAt)
		}
		alice, _ := tx.Member(ctx, "c1", "alice")
		bob, _ := tx.Member(ctx, "c1", "bob")
		if alice.ReadSeq != 1 || alice.DeliveredSeq != 1 || bob.ReadSeq != 2 || bob.DeliveredSeq != 2 || bob.Hidden {
			t.Errorf("members after appends: alice %+v, bob %+v; want each read and delivered up to what it sent, bob visible", alice, bob)
		}
		evs, err := tx.Events(ctx, "bob", 0, 10)
		if err != nil || len(evs) != 2 {
			return fmt.Errorf("bob's events = %+v, %v", evs, err)
		}
		for i, e := range evs {
			if e.Type != store.EventMessage || e.ConvID != "c1" || e.Seq != int64(i+1) || e.Cursor != int64(i+1) || e.Message == nil || e.Message.Seq != e.Seq {
				t.Errorf("bob's event %d = %+v", i, e)
			}
		}
		if evs[0].TS != first.CreatedAt || !reflect.DeepEqual(*evs[0].Message, first) {
			t.Errorf("bob's first event %+v carries %+v, want ts %d and %+v", evs[0], evs[0].Message, first.CreatedAt, first)
		}
		got, err := tx.MessageByClientID(ctx, "alice", "a1")
		if err != nil || !reflect.DeepEqual(got, first) {
			t.Errorf("MessageByClientID after append = %+v, %v", got, err)
		}
		return nil
	})
}

func testAppendDuplicate(t *testing.T, s store.Store) {
	appendFixture(t, s)
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		c := newConversation("c2")
		c.MaxSeq = 0
		if err := tx.CreateConversation(ctx, c); err != nil {
			return err
		}
		return tx.PutMember(ctx, store.Member{ConvID: "c2", UserID: "alice", Ordinal: 1})
	})
	orig := mustAppend(t, s, newAppend("c1", "alice", "x")).Message
	retry := newAppend("c1", "alice", "x")
	retry.MsgID, retry.Content = "another-msg-id", []byte(`"changed"`)
	for _, conv := range []string{"c1", "c2", "missing"} {
		retry.ConvID = conv
		res, err := s.AppendMessage(t.Context(), retry)
		if err != nil || !res.Duplicate || !reflect.DeepEqual(res.Message, orig) || res.Events != nil {
			t.Errorf("retry naming %s = %+v, %v; want the original %+v, nothing appended", conv, res, err, orig)
		}
	}
	// The same client id from another sender is another message.
	if res := mustAppend(t, s, newAppend("c1", "bob", "x")); res.Duplicate || res.Message.Seq != 2 {
		t.Errorf("bob's x = %+v, want a new message with seq 2", res)
	}
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		for _, u := range []string{"alice", "bob"} {
			b, err := tx.Cursors(ctx, u)
			if err != nil || b.Last != 2 {
				t.Errorf("%s's cursors = %+v, %v; want last 2: a retry appends nothing", u, b, err)
			}
		}
		return nil
	})
}

func testAppendNotMember(t *testing.T, s store.Store) {
	appendFixture(t, s)
	for _, m := range []store.Message{newAppend("c1", "carol", "c"), newAppend("missing", "alice", "m"), newAppend("c1", "nobody", "n")} {
		_, err := s.AppendMessage(t.Context(), m)
		wantErr(t, "append by "+m.SenderID+" to "+m.ConvID, err, store.ErrNotMember)
		wantErr(t, "append by "+m.SenderID+" to "+m.ConvID, err, store.ErrNotFound)
	}
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		c, err := tx.Conversation(ctx, "c1")
		if err != nil || c.MaxSeq != 0 {
			t.Errorf("conversation after refused appends = %+v, %v; want MaxSeq 0", c, err)
		}
		_, err = tx.MessageByClientID(ctx, "carol", "c")
		wantErr(t, "a refused message", err, store.ErrNotFound)
		return nil
	})
}

// testAppendFollowsUpdates: an append sees every change an Update made to what it reads
// (members joining, leaving and hiding, cursors taken by other events, the conversation
// row), and nothing of an Update that failed. A backend that keeps this state in memory
// must keep it right.
func testAppendFollowsUpdates(t *testing.T, s store.Store) {
	appendFixture(t, s)
	mustAppend(t, s, newAppend("c1", "alice", "1"))
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		if _, err := tx.AppendEvent(ctx, store.Event{UserID: "bob", Type: "read", ConvID: "c1", TS: 1, Data: []byte(`{}`)}); err != nil {
			return err
		}
		if err := tx.PutMember(ctx, store.Member{ConvID: "c1", UserID: "carol", Ordinal: 3}); err != nil {
			return err
		}
		c, err := tx.Conversation(ctx, "c1")
		if err != nil {
			return err
		}
		c.Name, c.MembersCount = "renamed", 3
		return tx.UpdateConversation(ctx, c)
	})
	res := mustAppend(t, s, newAppend("c1", "carol", "2"))
	wantDeliveries(t, "after carol joined and bob got an event", res,
		store.Delivery{UserID: "alice", Cursor: 2}, store.Delivery{UserID: "bob", Cursor: 3}, store.Delivery{UserID: "carol", Cursor: 1})

	// A failed Update that removed bob and changed carol leaves nothing behind.
	err := s.Update(t.Context(), func(tx store.Tx) error {
		ctx := t.Context()
		if err := tx.DeleteMember(ctx, "c1", "bob"); err != nil {
			return err
		}
		if _, err := tx.AppendEvent(ctx, store.Event{UserID: "carol", Type: "read", ConvID: "c1", TS: 1, Data: []byte(`{}`)}); err != nil {
			return err
		}
		return errTest
	})
	wantErr(t, "failing Update", err, errTest)
	res = mustAppend(t, s, newAppend("c1", "alice", "3"))
	wantDeliveries(t, "after a failed Update", res,
		store.Delivery{UserID: "alice", Cursor: 3}, store.Delivery{UserID: "bob", Cursor: 4}, store.Delivery{UserID: "carol", Cursor: 2})

	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.DeleteMember(ctx, "c1", "bob") })
	_, err = s.AppendMessage(t.Context(), newAppend("c1", "bob", "4"))
	wantErr(t, "append by a member who left", err, store.ErrNotMember)
	res = mustAppend(t, s, newAppend("c1", "carol", "5"))
	wantDeliveries(t, "after bob left", res, store.Delivery{UserID: "alice", Cursor: 4}, store.Delivery{UserID: "carol", Cursor: 3})
	if res.Message.Seq != 4 {
		t.Errorf("seq after bob left = %d, want 4", res.Message.Seq)
	}
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		c, err := tx.Conversation(ctx, "c1")
		if err != nil || c.Name != "renamed" || c.MembersCount != 3 || c.MaxSeq != 4 {
			t.Errorf("conversation = %+v, %v; want the Update's name and count with MaxSeq 4", c, err)
		}
		return nil
	})
}

// testAppendConcurrent: concurrent appenders to one conversation get distinct, gapless
// seqs, each appender's in the order it appended, and every member's log holds every
// message once, in seq order, with gapless cursors.
func testAppendConcurrent(t *testing.T, s store.Store) {
	appendFixture(t, s)
	const senders, each = 8, 40
	seqs := make([][]int64, senders)
	var wg sync.WaitGroup
	for i := range senders {
		sender := []string{"alice", "bob"}[i%2]
		wg.Go(func() {
			for j := range each {
				res, err := s.AppendMessage(context.Background(), newAppend("c1", sender, fmt.Sprintf("g%d-%d", i, j)))
				if err != nil {
					t.Errorf("append: %v", err)
					return
				}
				seqs[i] = append(seqs[i], res.Message.Seq)
			}
		})
	}
	wg.Wait()
	var all []int64
	for i, ss := range seqs {
		if !slices.IsSorted(ss) {
			t.Errorf("appender %d got seqs out of its order: %v", i, ss)
		}
		all = append(all, ss...)
	}
	slices.Sort(all)
	for i, seq := range all {
		if seq != int64(i+1) {
			t.Fatalf("seqs are not 1..%d without gaps or repeats: %v", senders*each, all)
		}
	}
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		for _, u := range []string{"alice", "bob"} {
			evs, err := tx.Events(ctx, u, 0, senders*each+1)
			if err != nil || len(evs) != senders*each {
				return fmt.Errorf("%s has %d events, %v; want %d", u, len(evs), err, senders*each)
			}
			for i, e := range evs {
				if e.Cursor != int64(i+1) || e.Seq != int64(i+1) {
					t.Fatalf("%s's event %d has cursor %d, seq %d; want both %d", u, i, e.Cursor, e.Seq, i+1)
				}
			}
		}
		return nil
	})
}

// testAppendStartedInOrder: one goroutine starts a burst of appends one after another,
// waiting for none (as a WebSocket connection pipelines its sends), while other goroutines
// append to the same conversation and run Updates on the same users. The burst is applied
// in start order, whatever order its Waits come in: its seqs and each member's cursors
// increase in start order, a repeat of an earlier client id in the same burst is that
// one's duplicate, and an append that fails in the middle leaves the others alone. The
// conversation's seqs stay gapless.
func testAppendStartedInOrder(t *testing.T, s store.Store) {
	appendFixture(t, s)
	const burst, others, perOther = 200, 4, 40
	const dupOf, dupAt, failAt = 10, 20, 30
	ctx := t.Context()

	begin := make(chan struct{})
	var wg sync.WaitGroup
	for g := range others {
		wg.Go(func() {
			<-begin
			for i := range perOther {
				if g == 0 { // an Update between the appends, on a member of the conversation
					err := s.Update(ctx, func(tx store.Tx) error {
						_, err := tx.AppendEvent(ctx, store.Event{UserID: "bob", Type: "read", ConvID: "c1", TS: 1, Data: []byte(`{}`)})
						return err
					})
					if err != nil {
						t.Errorf("Update beside the burst: %v", err)
						return
					}
					continue
				}
				if _, err := s.AppendMessage(ctx, newAppend("c1", "bob", fmt.Sprintf("b%d-%d", g, i))); err != nil {
					t.Errorf("bob's append beside the burst: %v", err)
					return
				}
			}
		})
	}
	close(begin)
	pending := make([]store.PendingAppend, burst)
	for i := range burst {
		m := newAppend("c1", "alice", fmt.Sprint("a", i))
		switch i {
		case dupAt:
			m.ClientMsgID, m.MsgID = fmt.Sprint("a", dupOf), "another-msg-id"
		case failAt:
			m.ConvID = "missing"
		}
		p, err := s.StartAppend(ctx, m)
		if err != nil {
			t.Fatalf("StartAppend %d: %v", i, err)
		}
		pending[i] = p
	}
	results := make([]store.Appended, burst)
	for i := burst - 1; i >= 0; i-- { // the order of the Waits does not matter
		res, err := pending[i].Wait()
		if i == failAt {
			wantErr(t, "the append to a missing conversation", err, store.ErrNotMember)
			continue
		}
		if err != nil {
			t.Fatalf("Wait %d: %v", i, err)
		}
		results[i] = res
	}
	wg.Wait()

	if res := results[dupAt]; !res.Duplicate || !reflect.DeepEqual(res.Message, results[dupOf].Message) {
		t.Errorf("the repeat of a%d in the same burst = %+v, want the original %+v", dupOf, res, results[dupOf].Message)
	}
	var prev store.Appended
	for i, res := range results {
		if i == dupAt || i == failAt {
			continue
		}
		if res.Duplicate || res.Message.ClientMsgID != fmt.Sprint("a", i) {
			t.Fatalf("append %d = %+v, want a new message a%d", i, res, i)
		}
		if i > 0 && (res.Message.Seq <= prev.Message.Seq || !cursorsAfter(res.Events, prev.Events)) {
			t.Fatalf("append %d got seq %d, events %v after seq %d, events %v: not in start order",
				i, res.Message.Seq, res.Events, prev.Message.Seq, prev.Events)
		}
		prev = res
	}
	total := burst - 2 + (others-1)*perOther
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		ms, err := tx.Messages(ctx, "c1", store.MessageRange{Limit: total + 1})
		if err != nil {
			return err
		}
		if got := seqsOf(ms); len(got) != total || got[0] != 1 || got[len(got)-1] != int64(total) {
			t.Errorf("c1 holds seqs %v, want 1..%d", got, total)
		}
		return nil
	})
}

// cursorsAfter reports whether every user's cursor in evs is above that user's in prev.
func cursorsAfter(evs, prev []store.Delivery) bool {
	for _, d := range evs {
		i := slices.IndexFunc(prev, func(p store.Delivery) bool { return p.UserID == d.UserID })
		if i < 0 || d.Cursor <= prev[i].Cursor {
			return false
		}
	}
	return len(evs) == len(prev)
}

// seqsOf returns the seq of each message.
func seqsOf(ms []store.Message) []int64 {
	out := make([]int64, len(ms))
	for i, m := range ms {
		out[i] = m.Seq
	}
	return out
}

// testAppendAfterReopen: after a reopen, appends go on from the stored seqs and cursors (a
// backend that holds them in memory rebuilds them), and a retry of a message sent before
// the reopen still gets the original.
func testAppendAfterReopen(t *testing.T, h Harness) {
	dir := t.TempDir()
	s := h.Open(t, Config{Dir: dir})
	appendFixture(t, s)
	first := mustAppend(t, s, newAppend("c1", "alice", "before"))
	mustAppend(t, s, newAppend("c1", "bob", "before"))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s = h.Open(t, Config{Dir: dir})
	if res := mustAppend(t, s, newAppend("c1", "alice", "before")); !res.Duplicate || !reflect.DeepEqual(res.Message, first.Message) {
		t.Errorf("retry after reopen = %+v, want the original %+v", res, first.Message)
	}
	res := mustAppend(t, s, newAppend("c1", "bob", "after"))
	if res.Message.Seq != 3 {
		t.Errorf("seq after reopen = %d, want 3", res.Message.Seq)
	}
	wantDeliveries(t, "after reopen", res, store.Delivery{UserID: "alice", Cursor: 3}, store.Delivery{UserID: "bob", Cursor: 3})
}

// testAppendRowsAfterSends holds a backend that leaves rows to be implied by the newest
// message (the conversation's max_seq and activity, its sender's positions) to what readers
// must see all the same: Conversation, Member, Members and Memberships agree with the rows a
// backend that rewrites them on every send would hold, across runs of sends by one member,
// a change of sender, a member who had hidden the conversation, positions advanced below
// and above what a send implies, a rename read and written back by an Update, and a reopen.
func testAppendRowsAfterSends(t *testing.T, h Harness) {
	dir := t.TempDir()
	s := h.Open(t, Config{Dir: dir})
	appendFixture(t, s)
	at := int64(1_800_000_000_000) // after the fixture conversation's creation
	send := func(sender string) int64 {
		t.Helper()
		at += 10
		m := newAppend("c1", sender, fmt.Sprintf("%s-%d", sender, at))
		m.CreatedAt = at
		return mustAppend(t, s, m).Message.Seq
	}
	type pos struct{ read, delivered int64 }
	check := func(what string, maxSeq int64, alice, bob pos, bobHidden bool) {
		t.Helper()
		view(t, s, func(ctx context.Context, tx store.ReadTx) error {
			c, err := tx.Conversation(ctx, "c1")
			if err != nil || c.MaxSeq != maxSeq || c.UpdatedAt != at {
				t.Errorf("%s: conversation %+v, %v; want MaxSeq %d, UpdatedAt %d", what, c, err, maxSeq, at)
			}
			want := map[string]pos{"alice": alice, "bob": bob}
			ms, err := tx.Members(ctx, "c1")
			if err != nil || len(ms) != 2 {
				return fmt.Errorf("%s: members %+v, %v", what, ms, err)
			}
			for _, m := range ms {
				one, err := tx.Member(ctx, "c1", m.UserID)
				if err != nil || one != m {
					t.Errorf("%s: Member(%s) = %+v, %v; Members has %+v", what, m.UserID, one, err, m)
				}
				if got := (pos{m.ReadSeq, m.DeliveredSeq}); got != want[m.UserID] || m.Hidden != (m.UserID == "bob" && bobHidden) {
					t.Errorf("%s: %s read/delivered %+v hidden %v, want %+v hidden %v", what, m.UserID, got, m.Hidden, want[m.UserID], m.UserID == "bob" && bobHidden)
				}
				ships, err := tx.Memberships(ctx, m.UserID)
				if err != nil || len(ships) != 1 || ships[0].Member != m || ships[0].Conversation != c {
					t.Errorf("%s: Memberships(%s) = %+v, %v; want %+v in %+v", what, m.UserID, ships, err, m, c)
				}
			}
			return nil
		})
	}
	advance := func(user string, read, delivered int64) {
		t.Helper()
		update(t, s, func(ctx context.Context, tx store.Tx) error {
			_, _, err := tx.AdvancePositions(ctx, "c1", user, read, delivered)
			return err
		})
	}

	send("alice")
	send("alice")
	send("alice")
	check("three sends by alice", 3, pos{3, 3}, pos{0, 0}, false)
	advance("alice", 1, 2) // below what her sends imply: nothing moves back
	check("alice advanced below her sends", 3, pos{3, 3}, pos{0, 0}, false)
	advance("bob", 0, 3)
	send("bob")
	check("then one by bob", 4, pos{3, 3}, pos{4, 4}, false)
	update(t, s, func(ctx context.Context, tx store.Tx) error { // bob hides the conversation
		m, err := tx.Member(ctx, "c1", "bob")
		m.Hidden = true
		if err == nil {
			err = tx.PutMember(ctx, m)
		}
		return err
	})
	check("bob hid it", 4, pos{3, 3}, pos{4, 4}, true)
	send("bob")
	check("bob sent while hidden", 5, pos{3, 3}, pos{5, 5}, false)
	send("alice")
	update(t, s, func(ctx context.Context, tx store.Tx) error { // a rename, read and written back
		c, err := tx.Conversation(ctx, "c1")
		c.Name = "renamed"
		if err == nil {
			err = tx.UpdateConversation(ctx, c)
		}
		return err
	})
	advance("alice", 9, 9) // above: positions are the members' to move on
	check("alice sent, a rename, alice read ahead", 6, pos{9, 9}, pos{5, 5}, false)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s = h.Open(t, Config{Dir: dir})
	check("after a reopen", 6, pos{9, 9}, pos{5, 5}, false)
	if seq := send("bob"); seq != 7 {
		t.Errorf("send after reopen got seq %d, want 7", seq)
	}
	check("bob sent after the reopen", 7, pos{9, 9}, pos{7, 7}, false)
}

// testAppendReadFanout holds AppendMessage to Conversation.ReadFrom: a conversation that
// switches to read fanout keeps one gapless seq across the switch; its messages from
// ReadFrom on are stored once, with no event in any member's log; only the sender's row
// changes (its positions, its hidden flag), never another member's; non-members are
// refused and duplicates found as in write fanout; all of it survives a reopen.
func testAppendReadFanout(t *testing.T, h Harness) {
	dir := t.TempDir()
	s := h.Open(t, Config{Dir: dir})
	appendFixture(t, s)
	createUsers(t, s, "dave")
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		return tx.PutMember(ctx, store.Member{ConvID: "c1", UserID: "carol", Ordinal: 3, JoinedAt: 1})
	})
	before := mustAppend(t, s, newAppend("c1", "alice", "w1"))
	if len(before.Events) != 3 {
		t.Fatalf("write-fanout append events = %+v, want one per member", before.Events)
	}
	update(t, s, func(ctx context.Context, tx store.Tx) error { // the switch, and bob hides it
		c, err := tx.Conversation(ctx, "c1")
		if err != nil {
			return err
		}
		c.ReadFrom = c.MaxSeq + 1
		if err := tx.UpdateConversation(ctx, c); err != nil {
			return err
		}
		m, err := tx.Member(ctx, "c1", "bob")
		m.Hidden = true
		if err == nil {
			err = tx.PutMember(ctx, m)
		}
		return err
	})
	var seqs []int64
	for i, sender := range []string{"alice", "alice", "bob", "carol", "bob"} {
		res := mustAppend(t, s, newAppend("c1", sender, fmt.Sprint("r", i)))
		if res.Events != nil || res.Duplicate {
			t.Errorf("read-fanout append %d = %+v, want no events", i, res)
		}
		seqs = append(seqs, res.Message.Seq)
	}
	if !slices.Equal(seqs, []int64{2, 3, 4, 5, 6}) {
		t.Errorf("seqs across the switch = %v, want 2..6", seqs)
	}
	if res := mustAppend(t, s, newAppend("c1", "bob", "r2")); !res.Duplicate || res.Message.Seq != 4 {
		t.Errorf("retry in read fanout = %+v, want the original seq 4", res)
	}
	_, err := s.AppendMessage(t.Context(), newAppend("c1", "dave", "x"))
	wantErr(t, "non-member in read fanout", err, store.ErrNotMember)

	check := func(what string) {
		t.Helper()
		view(t, s, func(ctx context.Context, tx store.ReadTx) error {
			c, err := tx.Conversation(ctx, "c1")
			if err != nil || c.MaxSeq != 6 || c.ReadFrom != 2 || !c.ReadFanout() {
				t.Errorf("%s: conversation %+v, %v; want MaxSeq 6, ReadFrom 2", what, c, err)
			}
			for _, u := range []string{"alice", "bob", "carol"} {
				evs, err := tx.Events(ctx, u, 0, 10)
				if err != nil || len(evs) != 1 || evs[0].Seq != 1 {
					t.Errorf("%s: %s's events = %+v, %v; want only the write-fanout message", what, u, evs, err)
				}
			}
			want := map[string][3]int64{"alice": {3, 3, 0}, "bob": {6, 6, 0}, "carol": {5, 5, 0}}
			ms, err := tx.Members(ctx, "c1")
			if err != nil {
				return err
			}
			for _, m := range ms {
				got := [3]int64{m.ReadSeq, m.DeliveredSeq, 0}
				if m.Hidden {
					got[2] = 1
				}
				if got != want[m.UserID] {
					t.Errorf("%s: %s read, delivered, hidden = %v, want %v", what, m.UserID, got, want[m.UserID])
				}
			}
			got, err := tx.Messages(ctx, "c1", store.MessageRange{AfterSeq: 0, Limit: 10})
			if err != nil || !slices.Equal(seqsOf(got), []int64{1, 2, 3, 4, 5, 6}) {
				t.Errorf("%s: history %v, %v", what, seqsOf(got), err)
			}
			return nil
		})
	}
	check("after the appends")
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s = h.Open(t, Config{Dir: dir})
	check("after a reopen")
	if res := mustAppend(t, s, newAppend("c1", "carol", "after")); res.Message.Seq != 7 || res.Events != nil {
		t.Errorf("append after reopen = %+v, want seq 7 and no events", res)
	}
}

// testReadFanoutMarks holds MarkReader to its contract: each append to a read-fanout
// conversation takes the next mark, appends elsewhere take none, a user's changes are the
// read-fanout conversations they are a member of (joining adds one, leaving removes it,
// a switch adds every member) whose mark is above the one asked from, and marks go on
// rising after a reopen.
func testReadFanoutMarks(t *testing.T, h Harness) {
	dir := t.TempDir()
	s := h.Open(t, Config{Dir: dir})
	createUsers(t, s, "alice", "bob", "carol", "dave")
	members := map[string][]string{"c1": {"alice", "bob"}, "c2": {"alice", "carol"}, "c3": {"alice", "bob"}}
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for _, id := range []string{"c1", "c2", "c3"} {
			c := newConversation(id)
			c.MaxSeq = 0
			if err := tx.CreateConversation(ctx, c); err != nil {
				return err
			}
			for i, u := range members[id] {
				if err := tx.PutMember(ctx, store.Member{ConvID: id, UserID: u, Ordinal: int64(i + 1), JoinedAt: 1}); err != nil {
					return err
				}
			}
		}
		return nil
	})
	toRead := func(id string) {
		t.Helper()
		update(t, s, func(ctx context.Context, tx store.Tx) error {
			c, err := tx.Conversation(ctx, id)
			if err != nil {
				return err
			}
			c.ReadFrom = c.MaxSeq + 1
			return tx.UpdateConversation(ctx, c)
		})
	}
	n := 0
	send := func(conv, sender string) {
		t.Helper()
		n++
		mustAppend(t, s, newAppend(conv, sender, fmt.Sprint("m", n)))
	}
	// want: the conversations changed for user after a mark, with their marks; and the mark.
	want := func(what, user string, after int64, wantMark int64, convs map[string]int64) {
		t.Helper()
		view(t, s, func(ctx context.Context, tx store.ReadTx) error {
			got, mark, err := tx.ReadFanoutChanges(ctx, user, after)
			if err != nil {
				return err
			}
			gotConvs := map[string]int64{}
			for _, ms := range got {
				gotConvs[ms.ConvID] = ms.Conversation.Mark
				one, err := tx.Member(ctx, ms.ConvID, user)
				c, err2 := tx.Conversation(ctx, ms.ConvID)
				if err != nil || err2 != nil || one != ms.Member || c != ms.Conversation || ms.UserID != user {
					t.Errorf("%s: change %+v disagrees with Member %+v and Conversation %+v (%v, %v)", what, ms, one, c, err, err2)
				}
			}
			if mark != wantMark || !reflect.DeepEqual(gotConvs, convs) {
				t.Errorf("%s: ReadFanoutChanges(%s, %d) = %v, mark %d; want %v, mark %d", what, user, after, gotConvs, mark, convs, wantMark)
			}
			return nil
		})
	}
	none := map[string]int64{}

	send("c1", "alice")
	want("before any read fanout", "alice", 0, 0, none)
	toRead("c1")
	want("switched, no message yet", "alice", 0, 0, none)
	send("c1", "bob")
	want("one read-fanout message", "alice", 0, 1, map[string]int64{"c1": 1})
	want("the sender too", "bob", 0, 1, map[string]int64{"c1": 1})
	want("not a member", "carol", 0, 1, none)
	want("nothing after the latest mark", "alice", 1, 1, none)
	toRead("c2")
	send("c2", "carol")
	send("c3", "bob") // write fanout: no mark
	want("two conversations", "alice", 0, 2, map[string]int64{"c1": 1, "c2": 2})
	want("after the first mark", "alice", 1, 2, map[string]int64{"c2": 2})
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		if err := tx.PutMember(ctx, store.Member{ConvID: "c1", UserID: "dave", Ordinal: 3, JoinedAt: 2}); err != nil {
			return err
		}
		return tx.DeleteMember(ctx, "c1", "bob")
	})
	want("joined", "dave", 0, 2, map[string]int64{"c1": 1})
	want("left", "bob", 0, 2, none)
	send("c1", "dave")
	want("a third mark", "alice", 2, 3, map[string]int64{"c1": 3})
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s = h.Open(t, Config{Dir: dir})
	want("after a reopen", "alice", 0, 3, map[string]int64{"c1": 3, "c2": 2})
	send("c2", "alice")
	want("marks go on rising", "carol", 3, 4, map[string]int64{"c2": 4})
}

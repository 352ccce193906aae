package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/parleychat/parley/internal/store"
)

// tierTests are the cold tier's tests: the segment index (pending, sealed, deleted, found
// by seq and by time), sealing (which removes exactly the segment's hot messages, or
// nothing when they changed), the overlay and the attachment count it shares with
// recalls, the conversation list the tiering pass walks, and MessageAt.
func tierTests() []struct {
	name string
	fn   func(t *testing.T, s store.Store)
} {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"Tier/PendingInvisible", testTierPendingInvisible},
		{"Tier/SealRemovesHot", testTierSealRemovesHot},
		{"Tier/SealConflict", testTierSealConflict},
		{"Tier/SealKeepsRows", testTierSealKeepsRows},
		{"Tier/SegmentsPaged", testTierSegmentsPaged},
		{"Tier/SegmentAtTime", testTierSegmentAtTime},
		{"Tier/Delete", testTierDelete},
		{"Tier/Overlays", testTierOverlays},
		{"Tier/OverlayUncounts", testTierOverlayUncounts},
		{"Tier/FailedUpdateLeavesNothing", testTierFailedUpdate},
		{"Tier/ConversationIDs", testTierConversationIDs},
		{"Tier/MessageAtAfterSeal", testTierMessageAtAfterSeal},
	}
	tests = needTier(tests)
	// MessageAt reads the hot messages only: every engine has it, tier or not.
	return append(tests, struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{"Messages/At", testMessageAt})
}

// needTier makes each of tests skip on an engine without the cold tier (skipWithoutTier).
func needTier(tests []struct {
	name string
	fn   func(t *testing.T, s store.Store)
}) []struct {
	name string
	fn   func(t *testing.T, s store.Store)
} {
	for i, tc := range tests {
		tests[i].fn = func(t *testing.T, s store.Store) {
			skipWithoutTier(t, s)
			tc.fn(t, s)
		}
	}
	return tests
}

// skipWithoutTier skips the test on an engine that does not implement the cold tier yet,
// which refuses its every method with ErrUnavailable: a fresh store is otherwise always
// available, so the skip cannot hide a real failure of an engine that has the tier.
func skipWithoutTier(t *testing.T, s store.Store) {
	t.Helper()
	err := s.View(t.Context(), func(tx store.ReadTx) error {
		_, err := tx.PendingSegments(t.Context(), 1)
		return err
	})
	if errors.Is(err, store.ErrUnavailable) {
		t.Skipf("no cold tier on this engine: %v", err)
	}
	if err != nil {
		t.Fatalf("PendingSegments of a fresh store: %v", err)
	}
}

// tierAt is the CreatedAt of message seq in the tier's fixtures: ten ms apart, above the
// fixture conversation's UpdatedAt so that the append keeps it.
func tierAt(seq int64) int64 { return 1_700_000_010_000 + 10*seq }

// tierFixture is appendFixture with n messages appended to c1 by alice, client ids k1..kn,
// message seq sent at tierAt(seq). It returns them as stored.
func tierFixture(t testing.TB, s store.Store, n int64) []store.Message {
	t.Helper()
	appendFixture(t, s)
	return appendTimed(t, s, "c1", 1, n)
}

// appendTimed appends messages seq from..to to convID, by alice, each sent at tierAt(seq).
func appendTimed(t testing.TB, s store.Store, convID string, from, to int64) []store.Message {
	t.Helper()
	var out []store.Message
	for seq := from; seq <= to; seq++ {
		m := newAppend(convID, "alice", fmt.Sprintf("k%d", seq))
		if convID != "c1" {
			// A message id of its own too: an engine may keep msg_id unique (SQLite does), and
			// newAppend made it from the client id.
			m.ClientMsgID = fmt.Sprintf("%s-k%d", convID, seq)
			m.MsgID = "msg-alice-" + m.ClientMsgID
		}
		m.CreatedAt = tierAt(seq)
		res := mustAppend(t, s, m)
		if res.Message.Seq != seq {
			t.Fatalf("fixture append %d took seq %d", seq, res.Message.Seq)
		}
		out = append(out, res.Message)
	}
	return out
}

// newSegment returns the pending segment of convID's messages first..last sent at tierAt.
func newSegment(convID string, first, last int64, key string) store.Segment {
	n := last - first + 1
	return store.Segment{
		ConvID: convID, FirstSeq: first, LastSeq: last, FirstTS: tierAt(first), LastTS: tierAt(last),
		Key: key, Count: int(n), Bytes: 100 * n, RawBytes: 300 * n, CreatedAt: 1_700_000_500_000 + first,
	}
}

// sealed returns seg as reads return it once sealed.
func sealed(seg store.Segment) store.Segment {
	seg.Sealed = true
	return seg
}

// addAndSeal adds each segment and seals it, none of its messages recalled.
func addAndSeal(t testing.TB, s store.Store, segs ...store.Segment) {
	t.Helper()
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for _, seg := range segs {
			if err := tx.AddSegment(ctx, seg); err != nil {
				return fmt.Errorf("AddSegment %s: %w", seg.Key, err)
			}
			if err := tx.SealSegment(ctx, seg.Key, 0); err != nil {
				return fmt.Errorf("SealSegment %s: %w", seg.Key, err)
			}
		}
		return nil
	})
}

// seal runs SealSegment in an Update of its own and returns its error.
func seal(t testing.TB, s store.Store, key string, recalled int) error {
	t.Helper()
	return s.Update(t.Context(), func(tx store.Tx) error { return tx.SealSegment(t.Context(), key, recalled) })
}

// readSegments returns Segments(convID, fromSeq, limit).
func readSegments(t testing.TB, s store.Store, convID string, fromSeq int64, limit int) []store.Segment {
	t.Helper()
	var out []store.Segment
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		var err error
		out, err = tx.Segments(ctx, convID, fromSeq, limit)
		if len(out) > limit {
			t.Errorf("Segments(limit %d) returned %d", limit, len(out))
		}
		return err
	})
	return out
}

// readPending returns PendingSegments(limit).
func readPending(t testing.TB, s store.Store, limit int) []store.Segment {
	t.Helper()
	var out []store.Segment
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		var err error
		out, err = tx.PendingSegments(ctx, limit)
		return err
	})
	return out
}

// wantSegments fails the test unless got is want (both empty counts as equal).
func wantSegments(t testing.TB, what string, got []store.Segment, want ...store.Segment) {
	t.Helper()
	if len(got) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got, want)) {
		t.Errorf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

// hotSeqs returns the seqs Messages returns of convID, all of them.
func hotSeqs(t testing.TB, s store.Store, convID string) []int64 {
	t.Helper()
	var seqs []int64
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		ms, err := tx.Messages(ctx, convID, store.MessageRange{Limit: 1000})
		for _, m := range ms {
			seqs = append(seqs, m.Seq)
		}
		return err
	})
	return seqs
}

// wantHot fails the test unless exactly the messages want of c1 (fixture client ids k<seq>)
// are stored hot, by every read of a message, and the others of 1..upTo are not.
func wantHot(t testing.TB, what string, s store.Store, upTo int64, want ...int64) {
	t.Helper()
	if got := hotSeqs(t, s, "c1"); !slices.Equal(got, want) {
		t.Errorf("%s: Messages returns seqs %v, want %v", what, got, want)
	}
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		for seq := int64(1); seq <= upTo; seq++ {
			m, err := tx.Message(ctx, "c1", seq)
			byClient, cerr := tx.MessageByClientID(ctx, "alice", fmt.Sprintf("k%d", seq))
			if slices.Contains(want, seq) {
				if err != nil || m.Seq != seq {
					t.Errorf("%s: Message(%d) = seq %d, %v; want it", what, seq, m.Seq, err)
				}
				if cerr != nil || byClient.Seq != seq {
					t.Errorf("%s: MessageByClientID(k%d) = seq %d, %v; want it", what, seq, byClient.Seq, cerr)
				}
				continue
			}
			wantErr(t, fmt.Sprintf("%s: Message(%d)", what, seq), err, store.ErrNotFound)
			wantErr(t, fmt.Sprintf("%s: MessageByClientID(k%d)", what, seq), cerr, store.ErrNotFound)
		}
		return nil
	})
}

func testTierPendingInvisible(t *testing.T, s store.Store) {
	tierFixture(t, s, 4)
	b := newSegment("c1", 1, 2, "seg-b")
	a := newSegment("c1", 3, 4, "seg-a")
	a.Sealed = true // ignored: AddSegment records it pending
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		if err := tx.AddSegment(ctx, b); err != nil {
			return err
		}
		if err := tx.AddSegment(ctx, a); err != nil {
			return err
		}
		other := newSegment("c2", 1, 1, "seg-b")
		wantErr(t, "AddSegment of a taken key", tx.AddSegment(ctx, other), store.ErrExists)
		return nil
	})
	a.Sealed = false
	wantSegments(t, "PendingSegments", readPending(t, s, 10), a, b)
	wantSegments(t, "PendingSegments(limit 1)", readPending(t, s, 1), a)
	wantSegments(t, "Segments with only pending ones", readSegments(t, s, "c1", 0, 10))
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		_, err := tx.LastSegment(ctx, "c1")
		wantErr(t, "LastSegment with only pending ones", err, store.ErrNotFound)
		_, err = tx.SegmentAtTime(ctx, "c1", 0)
		wantErr(t, "SegmentAtTime with only pending ones", err, store.ErrNotFound)
		return nil
	})
	// Pending, the segment's messages are still hot.
	wantHot(t, "with pending segments", s, 4, 1, 2, 3, 4)
}

func testTierSealRemovesHot(t *testing.T, s store.Store) {
	tierFixture(t, s, 6)
	seg := newSegment("c1", 1, 3, "seg-1")
	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.AddSegment(ctx, seg) })
	wantErr(t, "SealSegment of an unknown key", seal(t, s, "seg-none", 0), store.ErrNotFound)
	if err := seal(t, s, "seg-1", 0); err != nil {
		t.Fatalf("SealSegment: %v", err)
	}
	wantHot(t, "after sealing 1..3", s, 6, 4, 5, 6)
	wantSegments(t, "Segments", readSegments(t, s, "c1", 0, 10), sealed(seg))
	wantSegments(t, "PendingSegments", readPending(t, s, 10))
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		last, err := tx.LastSegment(ctx, "c1")
		if err != nil || !reflect.DeepEqual(last, sealed(seg)) {
			t.Errorf("LastSegment = %+v, %v; want %+v", last, err, sealed(seg))
		}
		ms, err := tx.Messages(ctx, "c1", store.MessageRange{BeforeSeq: 5, Limit: 10})
		if err != nil {
			return err
		}
		if len(ms) != 1 || ms[0].Seq != 4 {
			t.Errorf("Messages(BeforeSeq 5) = %d messages, want seq 4 alone", len(ms))
		}
		c, err := tx.Conversation(ctx, "c1")
		if err != nil {
			return err
		}
		if c.MaxSeq != 6 {
			t.Errorf("MaxSeq after sealing %d, want 6", c.MaxSeq)
		}
		return nil
	})
	wantErr(t, "SealSegment of a sealed segment", seal(t, s, "seg-1", 0), store.ErrNotFound)
	// The conversation goes on above the cold messages.
	if res := mustAppend(t, s, newAppend("c1", "alice", "k7")); res.Message.Seq != 7 {
		t.Errorf("append after sealing: seq %d, want 7", res.Message.Seq)
	}
	wantHot(t, "after sealing and appending", s, 7, 4, 5, 6, 7)
	// The next segment starts where the last one ended.
	next := newSegment("c1", 4, 5, "seg-2")
	addAndSeal(t, s, next)
	wantHot(t, "after sealing 4..5", s, 7, 6, 7)
	wantSegments(t, "Segments after two", readSegments(t, s, "c1", 0, 10), sealed(seg), sealed(next))
}

func testTierSealConflict(t *testing.T, s store.Store) {
	tierFixture(t, s, 6)
	recallAt := func(seq int64) {
		update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.RecallMessage(ctx, "c1", seq, 5000) })
	}
	recallAt(1)
	seg := newSegment("c1", 1, 4, "seg-1")
	beyond := newSegment("c1", 5, 8, "seg-beyond") // 7 and 8 were never sent
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		if err := tx.AddSegment(ctx, seg); err != nil {
			return err
		}
		return tx.AddSegment(ctx, beyond)
	})
	recallAt(3) // recalled after the segment was written with one recall
	// PendingSegments orders by key: "seg-1" < "seg-beyond".
	pending := []store.Segment{seg, beyond}
	for _, c := range []struct {
		what     string
		key      string
		recalled int
	}{
		{"a message recalled after the segment was written", "seg-1", 1},
		{"more recalled than are", "seg-1", 3},
		{"none recalled of two", "seg-1", 0},
		{"messages missing above MaxSeq", "seg-beyond", 0},
	} {
		// fn goes on after the conflict and commits: the conflict itself changed nothing.
		update(t, s, func(ctx context.Context, tx store.Tx) error {
			wantErr(t, "SealSegment with "+c.what, tx.SealSegment(ctx, c.key, c.recalled), store.ErrConflict)
			return nil
		})
		wantHot(t, "after a conflict with "+c.what, s, 6, 1, 2, 3, 4, 5, 6)
		wantSegments(t, "PendingSegments after a conflict with "+c.what, readPending(t, s, 10), pending...)
		wantSegments(t, "Segments after a conflict with "+c.what, readSegments(t, s, "c1", 0, 10))
	}
	// The right count seals it, even in the fn that had the conflict.
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		wantErr(t, "SealSegment with a stale count", tx.SealSegment(ctx, "seg-1", 1), store.ErrConflict)
		return tx.SealSegment(ctx, "seg-1", 2)
	})
	wantHot(t, "after sealing 1..4", s, 6, 5, 6)
	// A segment over messages already sealed finds them missing.
	again := newSegment("c1", 3, 5, "seg-again")
	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.AddSegment(ctx, again) })
	wantErr(t, "SealSegment over sealed messages", seal(t, s, "seg-again", 0), store.ErrConflict)
	wantHot(t, "after a conflict over sealed messages", s, 6, 5, 6)
	wantSegments(t, "Segments at the end", readSegments(t, s, "c1", 0, 10), sealed(seg))
}

// testTierSealKeepsRows seals every message of a conversation: what its rows say (its
// MaxSeq and activity, the sender's positions) must not change with the messages gone,
// however a backend derives them.
func testTierSealKeepsRows(t *testing.T, s store.Store) {
	tierFixture(t, s, 3)
	rows := func() (store.Conversation, []store.Member) {
		var c store.Conversation
		var ms []store.Member
		view(t, s, func(ctx context.Context, tx store.ReadTx) error {
			var err error
			if c, err = tx.Conversation(ctx, "c1"); err != nil {
				return err
			}
			ms, err = tx.Members(ctx, "c1")
			return err
		})
		return c, ms
	}
	c, ms := rows()
	if c.MaxSeq != 3 || c.UpdatedAt != tierAt(3) {
		t.Fatalf("before sealing: MaxSeq %d UpdatedAt %d, want 3 and %d", c.MaxSeq, c.UpdatedAt, tierAt(3))
	}
	addAndSeal(t, s, newSegment("c1", 1, 3, "seg-1"))
	if c2, ms2 := rows(); c2 != c || !reflect.DeepEqual(ms2, ms) {
		t.Errorf("after sealing every message:\n got %+v %+v\nwant %+v %+v", c2, ms2, c, ms)
	}
	m := newAppend("c1", "bob", "b1")
	m.CreatedAt = tierAt(4)
	if res := mustAppend(t, s, m); res.Message.Seq != 4 {
		t.Errorf("append after sealing every message: seq %d, want 4", res.Message.Seq)
	}
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		alice, err := tx.Member(ctx, "c1", "alice")
		if err == nil && (alice.ReadSeq != 3 || alice.DeliveredSeq != 3) {
			t.Errorf("alice, who sent the sealed messages: ReadSeq %d DeliveredSeq %d, want 3 and 3", alice.ReadSeq, alice.DeliveredSeq)
		}
		return err
	})
}

// segmentsFixture seals c1's messages 1..6 into three segments whose keys sort against
// their seqs, beside a segment of c2 (c2 sorts after c1, so it is what a read that
// overruns c1's keys would find).
func segmentsFixture(t testing.TB, s store.Store) []store.Segment {
	t.Helper()
	tierFixture(t, s, 6)
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		c := newConversation("c2")
		c.MaxSeq = 0
		if err := tx.CreateConversation(ctx, c); err != nil {
			return err
		}
		return tx.PutMember(ctx, store.Member{ConvID: "c2", UserID: "alice", Ordinal: 1, JoinedAt: 1})
	})
	appendTimed(t, s, "c2", 1, 2)
	segs := []store.Segment{newSegment("c1", 1, 2, "z"), newSegment("c1", 3, 4, "m"), newSegment("c1", 5, 6, "a")}
	other := newSegment("c2", 1, 2, "c2-seg")
	other.LastTS = tierAt(100)
	addAndSeal(t, s, segs[2], other, segs[0], segs[1])
	for i := range segs {
		segs[i].Sealed = true
	}
	return segs
}

func testTierSegmentsPaged(t *testing.T, s store.Store) {
	segs := segmentsFixture(t, s)
	for _, c := range []struct {
		from  int64
		limit int
		want  []store.Segment
	}{
		{0, 10, segs},
		{2, 10, segs},
		{3, 10, segs[1:]},
		{4, 10, segs[1:]},
		{6, 10, segs[2:]},
		{7, 10, nil},
		{0, 2, segs[:2]},
		{4, 1, segs[1:2]},
	} {
		wantSegments(t, fmt.Sprintf("Segments(from %d, limit %d)", c.from, c.limit), readSegments(t, s, "c1", c.from, c.limit), c.want...)
	}
	wantSegments(t, "Segments of an unknown conversation", readSegments(t, s, "c0", 0, 10))
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		last, err := tx.LastSegment(ctx, "c1")
		if err != nil || !reflect.DeepEqual(last, segs[2]) {
			t.Errorf("LastSegment = %+v, %v; want %+v", last, err, segs[2])
		}
		_, err = tx.LastSegment(ctx, "c0")
		wantErr(t, "LastSegment of a conversation without segments", err, store.ErrNotFound)
		return nil
	})
	wantHot(t, "after sealing everything", s, 6)
}

func testTierSegmentAtTime(t *testing.T, s store.Store) {
	segs := segmentsFixture(t, s)
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		for _, c := range []struct {
			what string
			ts   int64
			want int // index in segs; -1 for ErrNotFound
		}{
			{"before everything", 0, 0},
			{"the first message", tierAt(1), 0},
			{"the first segment's last message", tierAt(2), 0},
			{"just after the first segment", tierAt(2) + 1, 1},
			{"just before the second segment's first message", tierAt(3) - 1, 1},
			{"inside the last segment", tierAt(5) + 1, 2},
			{"the last sealed message", tierAt(6), 2},
			{"after every sealed message", tierAt(6) + 1, -1},
		} {
			got, err := tx.SegmentAtTime(ctx, "c1", c.ts)
			if c.want < 0 {
				wantErr(t, "SegmentAtTime "+c.what, err, store.ErrNotFound)
				continue
			}
			if err != nil || !reflect.DeepEqual(got, segs[c.want]) {
				t.Errorf("SegmentAtTime %s = %+v, %v; want %+v", c.what, got, err, segs[c.want])
			}
		}
		_, err := tx.SegmentAtTime(ctx, "c0", 0)
		wantErr(t, "SegmentAtTime of a conversation without segments", err, store.ErrNotFound)
		return nil
	})
}

func testTierDelete(t *testing.T, s store.Store) {
	tierFixture(t, s, 4)
	first, second := newSegment("c1", 1, 2, "seg-1"), newSegment("c1", 3, 4, "seg-2")
	addAndSeal(t, s, first, second)
	pending := newSegment("c1", 5, 6, "seg-pending")
	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.AddSegment(ctx, pending) })
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		if err := tx.DeleteSegment(ctx, "seg-pending"); err != nil {
			return fmt.Errorf("DeleteSegment of a pending segment: %w", err)
		}
		if err := tx.DeleteSegment(ctx, "seg-2"); err != nil {
			return fmt.Errorf("DeleteSegment of a sealed segment: %w", err)
		}
		wantErr(t, "DeleteSegment twice", tx.DeleteSegment(ctx, "seg-2"), store.ErrNotFound)
		wantErr(t, "DeleteSegment of an unknown key", tx.DeleteSegment(ctx, "seg-none"), store.ErrNotFound)
		return nil
	})
	wantSegments(t, "PendingSegments after deleting", readPending(t, s, 10))
	wantSegments(t, "Segments after deleting", readSegments(t, s, "c1", 0, 10), sealed(first))
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		last, err := tx.LastSegment(ctx, "c1")
		if err != nil || !reflect.DeepEqual(last, sealed(first)) {
			t.Errorf("LastSegment after deleting the last = %+v, %v; want %+v", last, err, sealed(first))
		}
		_, err = tx.SegmentAtTime(ctx, "c1", tierAt(3))
		wantErr(t, "SegmentAtTime of the deleted segment's messages", err, store.ErrNotFound)
		return nil
	})
	wantErr(t, "SealSegment of a deleted pending segment", seal(t, s, "seg-pending", 0), store.ErrNotFound)
	// A deleted key is free again.
	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.AddSegment(ctx, pending) })
	wantSegments(t, "PendingSegments after adding the key again", readPending(t, s, 10), pending)
}

// readOverlays returns Overlays(convID, from, to).
func readOverlays(t testing.TB, s store.Store, convID string, from, to int64) []store.Message {
	t.Helper()
	var out []store.Message
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		var err error
		out, err = tx.Overlays(ctx, convID, from, to)
		return err
	})
	return out
}

// recalledCopy returns m as a recall leaves it.
func recalledCopy(m store.Message) store.Message {
	m.Content, m.Extra, m.Recalled = nil, nil, true
	return m
}

func testTierOverlays(t *testing.T, s store.Store) {
	msgs := tierFixture(t, s, 6)
	addAndSeal(t, s, newSegment("c1", 1, 6, "seg-1"))
	two := recalledCopy(msgs[1])
	four := msgs[3]
	four.Mentions = []string{"bob"}
	five := recalledCopy(msgs[4])
	elsewhere := recalledCopy(msgs[2])
	elsewhere.ConvID = "c2"
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for _, m := range []store.Message{five, two, elsewhere, four} {
			if err := tx.PutOverlay(ctx, m, 5000); err != nil {
				return fmt.Errorf("PutOverlay %s/%d: %w", m.ConvID, m.Seq, err)
			}
		}
		return nil
	})
	wantMessages := func(what string, got []store.Message, want ...store.Message) {
		t.Helper()
		if len(got) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got, want)) {
			t.Errorf("%s:\n got %+v\nwant %+v", what, got, want)
		}
	}
	wantMessages("Overlays(0, 100)", readOverlays(t, s, "c1", 0, 100), two, four, five)
	wantMessages("Overlays(2, 4)", readOverlays(t, s, "c1", 2, 4), two, four)
	wantMessages("Overlays(3, 3)", readOverlays(t, s, "c1", 3, 3))
	wantMessages("Overlays(5, 5)", readOverlays(t, s, "c1", 5, 5), five)
	wantMessages("Overlays(6, 100)", readOverlays(t, s, "c1", 6, 100))
	wantMessages("Overlays of c2", readOverlays(t, s, "c2", 0, 100), elsewhere)
	wantMessages("Overlays of an unknown conversation", readOverlays(t, s, "c0", 0, 100))
	// A later overlay of a message replaces the earlier one.
	fourRecalled := recalledCopy(four)
	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.PutOverlay(ctx, fourRecalled, 6000) })
	wantMessages("Overlays after overwriting 4", readOverlays(t, s, "c1", 0, 100), two, fourRecalled, five)
}

func testTierOverlayUncounts(t *testing.T, s store.Store) {
	appendFixture(t, s)
	completeAttachments(t, s, "alice", "a_1")
	var msgs []store.Message
	for i, m := range []store.Message{
		carrying("c1", "alice", "k1", "a_1"), carrying("c1", "alice", "k2", "a_1"),
		newAppend("c1", "alice", "k3"), carrying("c1", "alice", "k4", "a_1"),
	} {
		m.CreatedAt = tierAt(int64(i + 1))
		msgs = append(msgs, mustAppend(t, s, m).Message)
	}
	wantRefs(t, "after the appends", s, "a_1", 3, 0)
	addAndSeal(t, s, newSegment("c1", 1, 3, "seg-1"))
	wantHot(t, "after sealing", s, 4, 4)
	wantRefs(t, "after sealing", s, "a_1", 3, 0)
	if got, want := allRefs(t, s, "a_1", 10), []store.MessageRef{{ConvID: "c1", Seq: 1}, {ConvID: "c1", Seq: 2}, {ConvID: "c1", Seq: 4}}; !slices.Equal(got, want) {
		t.Errorf("AttachmentRefs after sealing: %v, want %v", got, want)
	}
	put := func(m store.Message, at int64) {
		t.Helper()
		update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.PutOverlay(ctx, m, at) })
	}
	put(msgs[0], 4000) // an overlay that recalls nothing counts nothing
	wantRefs(t, "after an overlay that is no recall", s, "a_1", 3, 0)
	put(recalledCopy(msgs[0]), 5000)
	wantRefs(t, "after a cold recall", s, "a_1", 2, 0)
	put(recalledCopy(msgs[0]), 5500)
	wantRefs(t, "after the same cold recall again", s, "a_1", 2, 0)
	// Twice in one Update: still once.
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for _, at := range []int64{6000, 6500} {
			if err := tx.PutOverlay(ctx, recalledCopy(msgs[1]), at); err != nil {
				return err
			}
		}
		return nil
	})
	wantRefs(t, "after the second cold recall, put twice", s, "a_1", 1, 0)
	if got, want := allRefs(t, s, "a_1", 10), []store.MessageRef{{ConvID: "c1", Seq: 4}}; !slices.Equal(got, want) {
		t.Errorf("AttachmentRefs after the cold recalls: %v, want %v", got, want)
	}
	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.RecallMessage(ctx, "c1", 4, 7000) })
	wantRefs(t, "after the hot one recalled too", s, "a_1", 0, 7000)
	put(recalledCopy(msgs[1]), 8000)
	wantRefs(t, "after a cold recall put again at the end", s, "a_1", 0, 7000)
	if got := allRefs(t, s, "a_1", 10); len(got) != 0 {
		t.Errorf("AttachmentRefs after every recall: %v, want none", got)
	}
}

// testTierFailedUpdate writes to the tier in an Update that then fails: none of it may
// stay, the attachment count included.
func testTierFailedUpdate(t *testing.T, s store.Store) {
	appendFixture(t, s)
	completeAttachments(t, s, "alice", "a_1")
	var msgs []store.Message
	for i := range int64(4) {
		m := carrying("c1", "alice", fmt.Sprintf("k%d", i+1), "a_1")
		m.CreatedAt = tierAt(i + 1)
		msgs = append(msgs, mustAppend(t, s, m).Message)
	}
	first, pending := newSegment("c1", 1, 2, "seg-1"), newSegment("c1", 3, 4, "seg-2")
	addAndSeal(t, s, first)
	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.AddSegment(ctx, pending) })
	err := s.Update(t.Context(), func(tx store.Tx) error {
		ctx := t.Context()
		if err := tx.SealSegment(ctx, "seg-2", 0); err != nil {
			return err
		}
		if err := tx.PutOverlay(ctx, recalledCopy(msgs[0]), 5000); err != nil {
			return err
		}
		if err := tx.DeleteSegment(ctx, "seg-1"); err != nil {
			return err
		}
		if err := tx.AddSegment(ctx, newSegment("c1", 5, 5, "seg-3")); err != nil {
			return err
		}
		return errTest
	})
	wantErr(t, "the failing Update", err, errTest)
	wantHot(t, "after the failed Update", s, 4, 3, 4)
	wantSegments(t, "Segments after the failed Update", readSegments(t, s, "c1", 0, 10), sealed(first))
	wantSegments(t, "PendingSegments after the failed Update", readPending(t, s, 10), pending)
	if got := readOverlays(t, s, "c1", 0, 100); len(got) != 0 {
		t.Errorf("Overlays after the failed Update: %+v, want none", got)
	}
	wantRefs(t, "after the failed Update", s, "a_1", 4, 0)
	// What the failed Update left is what the next one works on.
	if err := seal(t, s, "seg-2", 0); err != nil {
		t.Fatalf("SealSegment after the failed Update: %v", err)
	}
	wantHot(t, "after sealing", s, 4)
	if res := mustAppend(t, s, newAppend("c1", "alice", "k5")); res.Message.Seq != 5 {
		t.Errorf("append after sealing every message: seq %d, want 5", res.Message.Seq)
	}
	wantRefs(t, "at the end", s, "a_1", 4, 0)
}

func testTierConversationIDs(t *testing.T, s store.Store) {
	ids := []string{"c3", "c10", "b", "c1", "c2"}
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for _, id := range ids {
			if err := tx.CreateConversation(ctx, newConversation(id)); err != nil {
				return err
			}
		}
		return nil
	})
	want := []string{"b", "c1", "c10", "c2", "c3"}
	page := func(after string, limit int) []string {
		var out []string
		view(t, s, func(ctx context.Context, tx store.ReadTx) error {
			var err error
			out, err = tx.ConversationIDs(ctx, after, limit)
			return err
		})
		if len(out) > limit {
			t.Errorf("ConversationIDs(limit %d) returned %d", limit, len(out))
		}
		return out
	}
	for _, limit := range []int{1, 2, 3, 10} {
		var got []string
		after := ""
		for range len(want) + 1 {
			p := page(after, limit)
			if len(p) == 0 {
				break
			}
			got = append(got, p...)
			after = p[len(p)-1]
		}
		if !slices.Equal(got, want) {
			t.Errorf("ConversationIDs in pages of %d: %v, want %v", limit, got, want)
		}
	}
	if got := page("c1", 10); !slices.Equal(got, want[2:]) {
		t.Errorf("ConversationIDs after c1: %v, want %v", got, want[2:])
	}
	if got := page("c", 10); !slices.Equal(got, want[1:]) {
		t.Errorf("ConversationIDs after c: %v, want %v", got, want[1:])
	}
	if got := page("c3", 10); len(got) != 0 {
		t.Errorf("ConversationIDs after the last: %v, want none", got)
	}
}

// messageAt returns MessageAt(convID, ts).
func messageAt(t testing.TB, s store.Store, convID string, ts int64) (int64, error) {
	t.Helper()
	var seq int64
	err := s.View(t.Context(), func(tx store.ReadTx) error {
		var err error
		seq, err = tx.MessageAt(t.Context(), convID, ts)
		return err
	})
	return seq, err
}

// wantMessageAt fails the test unless MessageAt(c1, ts) is seq, or ErrNotFound for 0.
func wantMessageAt(t testing.TB, what string, s store.Store, ts, seq int64) {
	t.Helper()
	got, err := messageAt(t, s, "c1", ts)
	if seq == 0 {
		wantErr(t, "MessageAt "+what, err, store.ErrNotFound)
		return
	}
	if err != nil || got != seq {
		t.Errorf("MessageAt %s = %d, %v; want %d", what, got, err, seq)
	}
}

func testMessageAt(t *testing.T, s store.Store) {
	appendFixture(t, s)
	wantMessageAt(t, "of a conversation without messages", s, 0, 0)
	_, err := messageAt(t, s, "c0", 0)
	wantErr(t, "MessageAt of an unknown conversation", err, store.ErrNotFound)
	// Seqs 1..7 sent at tierAt(seq), but 4 at the time of 3 and 6 before 5 (a node whose
	// clock is behind): the append raises 6 to the time of 5.
	for seq := int64(1); seq <= 7; seq++ {
		m := newAppend("c1", "alice", fmt.Sprintf("k%d", seq))
		m.CreatedAt = tierAt(seq)
		switch seq {
		case 4:
			m.CreatedAt = tierAt(3)
		case 6:
			m.CreatedAt = tierAt(1)
		}
		if res := mustAppend(t, s, m); res.Message.Seq != seq {
			t.Fatalf("append %d took seq %d", seq, res.Message.Seq)
		}
	}
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		m, err := tx.Message(ctx, "c1", 6)
		if err == nil && m.CreatedAt != tierAt(5) {
			t.Errorf("message 6 sent before 5: CreatedAt %d, want it raised to %d", m.CreatedAt, tierAt(5))
		}
		return err
	})
	for _, c := range []struct {
		what string
		ts   int64
		seq  int64
	}{
		{"before every message", 0, 1},
		{"at the first", tierAt(1), 1},
		{"between the first two", tierAt(1) + 1, 2},
		{"at exactly the second", tierAt(2), 2},
		{"at two of one time", tierAt(3), 3},
		{"just after two of one time", tierAt(3) + 1, 5},
		{"at a raised time", tierAt(5), 5},
		{"just after a raised time", tierAt(5) + 1, 7},
		{"at the last", tierAt(7), 7},
		{"after every message", tierAt(7) + 1, 0},
	} {
		wantMessageAt(t, c.what, s, c.ts, c.seq)
	}
}

func testTierMessageAtAfterSeal(t *testing.T, s store.Store) {
	tierFixture(t, s, 6)
	addAndSeal(t, s, newSegment("c1", 1, 3, "seg-1"))
	for _, c := range []struct {
		what string
		ts   int64
		seq  int64
	}{
		{"before every message", 0, 4},
		{"at a sealed message", tierAt(2), 4},
		{"at the first hot message", tierAt(4), 4},
		{"between two hot messages", tierAt(4) + 1, 5},
		{"at the last", tierAt(6), 6},
		{"after every message", tierAt(6) + 1, 0},
	} {
		wantMessageAt(t, c.what+" after sealing 1..3", s, c.ts, c.seq)
	}
	addAndSeal(t, s, newSegment("c1", 4, 6, "seg-2"))
	wantMessageAt(t, "with every message sealed", s, 0, 0)
}

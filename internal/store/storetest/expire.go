package storetest

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/parleychat/parley/internal/store"
)

// expireTests are retention's: the removal of a prefix of a conversation's hot messages
// and of a sealed segment, each uncounting the attachments of what it removes exactly
// once, whatever a recall uncounted before, and leaving MaxSeq and the later messages as
// they were.
func expireTests() []struct {
	name string
	fn   func(t *testing.T, s store.Store)
} {
	return needTier([]struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"Expire/Hot", testExpireHot},
		{"Expire/HotUncountsOnce", testExpireHotUncounts},
		{"Expire/Segment", testExpireSegment},
		{"Expire/SegmentUncountsOnce", testExpireSegmentUncounts},
		{"Expire/FailedUpdateLeavesNothing", testExpireFailedUpdate},
	})
}

// expire runs ExpireMessages(c1, through) in an Update of its own and returns its count.
func expire(t testing.TB, s store.Store, through, at int64) int {
	t.Helper()
	var n int
	update(t, s, func(ctx context.Context, tx store.Tx) (err error) {
		n, err = tx.ExpireMessages(ctx, "c1", through, at)
		return err
	})
	return n
}

// maxSeqOf returns the conversation's MaxSeq.
func maxSeqOf(t testing.TB, s store.Store, convID string) int64 {
	t.Helper()
	var c store.Conversation
	view(t, s, func(ctx context.Context, tx store.ReadTx) (err error) {
		c, err = tx.Conversation(ctx, convID)
		return err
	})
	return c.MaxSeq
}

func testExpireHot(t *testing.T, s store.Store) {
	tierFixture(t, s, 5)
	if n := expire(t, s, 0, 1000); n != 0 {
		t.Errorf("ExpireMessages through 0 removed %d", n)
	}
	if n := expire(t, s, 2, 1000); n != 2 {
		t.Errorf("ExpireMessages through 2 removed %d, want 2", n)
	}
	wantHot(t, "after expiring through 2", s, 5, 3, 4, 5)
	if n := expire(t, s, 2, 1000); n != 0 {
		t.Errorf("ExpireMessages through 2 again removed %d, want 0", n)
	}
	// The newest goes too: the conversation keeps its seqs.
	if n := expire(t, s, 5, 1000); n != 3 {
		t.Errorf("ExpireMessages through 5 removed %d, want 3", n)
	}
	wantHot(t, "after expiring everything", s, 5)
	if got := maxSeqOf(t, s, "c1"); got != 5 {
		t.Errorf("MaxSeq after expiring everything: %d, want 5", got)
	}
	res := mustAppend(t, s, newAppend("c1", "alice", "k6"))
	if res.Message.Seq != 6 {
		t.Errorf("an append after expiry took seq %d, want 6", res.Message.Seq)
	}
	wantHot(t, "after a new append", s, 6, 6)
}

func testExpireHotUncounts(t *testing.T, s store.Store) {
	appendFixture(t, s)
	completeAttachments(t, s, "alice", "a_1", "a_2")
	for i, m := range []store.Message{
		carrying("c1", "alice", "k1", "a_1"), carrying("c1", "alice", "k2", "a_1"),
		carrying("c1", "alice", "k3", "a_2"), carrying("c1", "alice", "k4", "a_1"),
	} {
		m.CreatedAt = tierAt(int64(i + 1))
		mustAppend(t, s, m)
	}
	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.RecallMessage(ctx, "c1", 2, 500) })
	wantRefs(t, "after a recall", s, "a_1", 2, 0)
	expire(t, s, 3, 900)
	wantRefs(t, "a_1 after expiring 1..3 (2 recalled)", s, "a_1", 1, 0)
	wantRefs(t, "a_2 after expiring 1..3", s, "a_2", 0, 900)
	if got, want := allRefs(t, s, "a_1", 10), []store.MessageRef{{ConvID: "c1", Seq: 4}}; !slices.Equal(got, want) {
		t.Errorf("AttachmentRefs(a_1) after expiry: %v, want %v", got, want)
	}
	if got := allRefs(t, s, "a_2", 10); len(got) != 0 {
		t.Errorf("AttachmentRefs(a_2) after expiry: %v, want none", got)
	}
	expire(t, s, 4, 1200)
	wantRefs(t, "a_1 after expiring the last", s, "a_1", 0, 1200)
}

// expireSegment runs ExpireSegment in an Update of its own and returns its error.
func expireSegment(t testing.TB, s store.Store, key string, attached []store.Message, at int64) error {
	t.Helper()
	return s.Update(t.Context(), func(tx store.Tx) error { return tx.ExpireSegment(t.Context(), key, attached, at) })
}

func testExpireSegment(t *testing.T, s store.Store) {
	ms := tierFixture(t, s, 6)
	a, b := newSegment("c1", 1, 2, "seg-a"), newSegment("c1", 3, 4, "seg-b")
	addAndSeal(t, s, a, b)
	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.PutOverlay(ctx, recalledCopy(ms[0]), 100) })
	wantErr(t, "ExpireSegment of no segment", expireSegment(t, s, "none", nil, 100), store.ErrNotFound)
	if err := expireSegment(t, s, "seg-a", nil, 100); err != nil {
		t.Fatalf("ExpireSegment: %v", err)
	}
	wantSegments(t, "sealed segments after expiring seg-a", readSegments(t, s, "c1", 0, 10), sealed(b))
	wantSegments(t, "pending segments after expiring seg-a", readPending(t, s, 10), a)
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		ov, err := tx.Overlays(ctx, "c1", 1, 10)
		if len(ov) != 0 {
			t.Errorf("overlays after expiring seg-a: %v, want none", ov)
		}
		if _, err := tx.SegmentAtTime(ctx, "c1", 0); err != nil {
			t.Errorf("SegmentAtTime after expiring seg-a: %v", err)
		}
		return err
	})
	wantErr(t, "ExpireSegment of a pending segment", expireSegment(t, s, "seg-a", nil, 100), store.ErrNotFound)
	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.DeleteSegment(ctx, "seg-a") })
	wantSegments(t, "pending segments after deleting seg-a", readPending(t, s, 10))
	wantHot(t, "hot messages", s, 6, 5, 6)
	// Not one of its own: refused, changing nothing.
	wrong := ms[4]
	wrong.AttachmentID = "a_1"
	if err := expireSegment(t, s, "seg-b", []store.Message{wrong}, 100); err == nil {
		t.Errorf("ExpireSegment with a message outside the segment succeeded")
	}
	wantSegments(t, "sealed segments after a refused expiry", readSegments(t, s, "c1", 0, 10), sealed(b))
	if got := maxSeqOf(t, s, "c1"); got != 6 {
		t.Errorf("MaxSeq: %d, want 6", got)
	}
}

func testExpireSegmentUncounts(t *testing.T, s store.Store) {
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
	addAndSeal(t, s, newSegment("c1", 1, 3, "seg-1"))
	// A cold recall of seq 2 uncounted it already.
	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.PutOverlay(ctx, recalledCopy(msgs[1]), 500) })
	wantRefs(t, "after a cold recall", s, "a_1", 2, 0)
	if err := expireSegment(t, s, "seg-1", []store.Message{msgs[0], msgs[1]}, 900); err != nil {
		t.Fatalf("ExpireSegment: %v", err)
	}
	wantRefs(t, "after expiring the segment", s, "a_1", 1, 0)
	if got, want := allRefs(t, s, "a_1", 10), []store.MessageRef{{ConvID: "c1", Seq: 4}}; !slices.Equal(got, want) {
		t.Errorf("AttachmentRefs after expiry: %v, want %v", got, want)
	}
	expire(t, s, 4, 1300)
	wantRefs(t, "after expiring the hot one too", s, "a_1", 0, 1300)
}

// testExpireFailedUpdate expires in an Update that then fails: nothing may change.
func testExpireFailedUpdate(t *testing.T, s store.Store) {
	appendFixture(t, s)
	completeAttachments(t, s, "alice", "a_1")
	var msgs []store.Message
	for i := range int64(4) {
		m := carrying("c1", "alice", fmt.Sprintf("k%d", i+1), "a_1")
		m.CreatedAt = tierAt(i + 1)
		msgs = append(msgs, mustAppend(t, s, m).Message)
	}
	seg := newSegment("c1", 1, 2, "seg-1")
	addAndSeal(t, s, seg)
	err := s.Update(t.Context(), func(tx store.Tx) error {
		ctx := t.Context()
		if err := tx.ExpireSegment(ctx, "seg-1", msgs[:2], 700); err != nil {
			return err
		}
		if _, err := tx.ExpireMessages(ctx, "c1", 3, 700); err != nil {
			return err
		}
		return errTest
	})
	wantErr(t, "the failing Update", err, errTest)
	wantRefs(t, "after the failed Update", s, "a_1", 4, 0)
	wantSegments(t, "sealed segments after the failed Update", readSegments(t, s, "c1", 0, 10), sealed(seg))
	wantSegments(t, "pending segments after the failed Update", readPending(t, s, 10))
	wantHot(t, "hot messages after the failed Update", s, 4, 3, 4)
}

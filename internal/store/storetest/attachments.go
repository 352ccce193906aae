package storetest

import (
	"cmp"
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/parleychat/parley/internal/store"
)

// attachmentTests are the attachment rows' tests: their life (create, complete, mark
// deleting, delete), the quota's sum, and the reference count that appends and recalls
// keep, on which the collector's safety rests.
func attachmentTests() []struct {
	name string
	fn   func(t *testing.T, s store.Store)
} {
	return []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"Attachments/Lifecycle", testAttachmentLifecycle},
		{"Attachments/Usage", testAttachmentUsage},
		{"Attachments/AppendCounts", testAttachmentAppendCounts},
		{"Attachments/AppendRefuses", testAttachmentAppendRefuses},
		{"Attachments/RecallUncounts", testAttachmentRecallUncounts},
		{"Attachments/Idle", testAttachmentIdle},
		{"Attachments/MarkDeleting", testAttachmentMarkDeleting},
		{"Attachments/RefsPaged", testAttachmentRefsPaged},
		{"Attachments/ReadFanout", testAttachmentReadFanout},
		{"Attachments/Concurrent", testAttachmentConcurrent},
	}
}

// attachmentAt is the CreatedAt of the attachment fixtures.
const attachmentAt = 1_700_000_000_500

// newAttachment returns an uploading attachment of owner.
func newAttachment(id, owner string, size int64) store.Attachment {
	return store.Attachment{ID: id, OwnerID: owner, State: store.AttachmentUploading, Size: size, CreatedAt: attachmentAt, IdleSince: attachmentAt}
}

// attachmentMeta is the meta CompleteAttachment gets in these tests.
var attachmentMeta = store.AttachmentMeta{
	MimeType: "image/jpeg", SHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
	Width: 4000, Height: 3000, DurationMS: 0, Thumbnail: true, Preview: "data:image/jpeg;base64,/9j/AA==",
	CompletedAt: attachmentAt + 10,
}

// completeAttachments creates complete attachments of owner.
func completeAttachments(t testing.TB, s store.Store, owner string, ids ...string) {
	t.Helper()
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for _, id := range ids {
			if err := tx.CreateAttachment(ctx, newAttachment(id, owner, 100)); err != nil {
				return err
			}
			if err := tx.CompleteAttachment(ctx, id, attachmentMeta); err != nil {
				return err
			}
		}
		return nil
	})
}

// readAttachment returns the attachment id.
func readAttachment(t testing.TB, s store.Store, id string) store.Attachment {
	t.Helper()
	var a store.Attachment
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		var err error
		a, err = tx.Attachment(ctx, id)
		return err
	})
	return a
}

// wantRefs fails the test unless attachment id has refs references and idleSince.
func wantRefs(t testing.TB, what string, s store.Store, id string, refs, idleSince int64) {
	t.Helper()
	a := readAttachment(t, s, id)
	if a.Refs != refs || a.IdleSince != idleSince {
		t.Errorf("%s: Refs %d IdleSince %d, want %d and %d", what, a.Refs, a.IdleSince, refs, idleSince)
	}
}

// carrying returns a message to append that carries attachment id.
func carrying(convID, sender, clientID, id string) store.Message {
	m := newAppend(convID, sender, clientID)
	m.ContentType, m.AttachmentID = 2, id
	m.Content = fmt.Appendf(nil, `{"attachment_id":%q}`, id)
	return m
}

// allRefs returns every message that carries attachment id, read a page of limit at a time.
func allRefs(t testing.TB, s store.Store, id string, limit int) []store.MessageRef {
	t.Helper()
	var out []store.MessageRef
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		conv, seq := "", int64(0)
		for {
			page, err := tx.AttachmentRefs(ctx, id, conv, seq, limit)
			if err != nil {
				return err
			}
			if len(page) > limit {
				t.Errorf("AttachmentRefs(limit %d) returned %d", limit, len(page))
			}
			if len(page) == 0 {
				return nil
			}
			out = append(out, page...)
			last := page[len(page)-1]
			conv, seq = last.ConvID, last.Seq
		}
	})
	return out
}

func testAttachmentLifecycle(t *testing.T, s store.Store) {
	createUsers(t, s, "alice")
	a := newAttachment("a_1", "alice", 1234)
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		if err := tx.CreateAttachment(ctx, a); err != nil {
			return err
		}
		wantErr(t, "CreateAttachment twice", tx.CreateAttachment(ctx, a), store.ErrExists)
		_, err := tx.Attachment(ctx, "a_none")
		wantErr(t, "Attachment of an unknown id", err, store.ErrNotFound)
		return nil
	})
	if got := readAttachment(t, s, "a_1"); !reflect.DeepEqual(got, a) {
		t.Errorf("created: %+v, want %+v", got, a)
	}
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		wantErr(t, "CompleteAttachment of an unknown id", tx.CompleteAttachment(ctx, "a_none", attachmentMeta), store.ErrNotFound)
		return tx.CompleteAttachment(ctx, "a_1", attachmentMeta)
	})
	want := a
	want.State, want.AttachmentMeta = store.AttachmentComplete, attachmentMeta
	if got := readAttachment(t, s, "a_1"); !reflect.DeepEqual(got, want) {
		t.Errorf("completed: %+v, want %+v", got, want)
	}
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		wantErr(t, "CompleteAttachment twice", tx.CompleteAttachment(ctx, "a_1", attachmentMeta), store.ErrNotFound)
		return nil
	})
	if got := readAttachment(t, s, "a_1"); !reflect.DeepEqual(got, want) {
		t.Errorf("after a second CompleteAttachment: %+v, want %+v", got, want)
	}
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		if err := tx.DeleteAttachment(ctx, "a_1"); err != nil {
			return err
		}
		wantErr(t, "DeleteAttachment twice", tx.DeleteAttachment(ctx, "a_1"), store.ErrNotFound)
		return nil
	})
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		_, err := tx.Attachment(ctx, "a_1")
		wantErr(t, "Attachment after DeleteAttachment", err, store.ErrNotFound)
		return nil
	})
}

func testAttachmentUsage(t *testing.T, s store.Store) {
	createUsers(t, s, "alice", "bob")
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for i, a := range []store.Attachment{
			{ID: "a_old", OwnerID: "alice", Size: 1000, CreatedAt: 100},
			{ID: "a_edge", OwnerID: "alice", Size: 20, CreatedAt: 200},
			{ID: "a_new", OwnerID: "alice", Size: 3, CreatedAt: 300},
			{ID: "a_bob", OwnerID: "bob", Size: 4000, CreatedAt: 300},
		} {
			a.State, a.IdleSince = store.AttachmentUploading, a.CreatedAt
			if err := tx.CreateAttachment(ctx, a); err != nil {
				return fmt.Errorf("attachment %d: %w", i, err)
			}
		}
		return tx.CompleteAttachment(ctx, "a_new", attachmentMeta) // complete counts too
	})
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		for _, c := range []struct {
			owner string
			since int64
			want  int64
		}{{"alice", 0, 1023}, {"alice", 200, 23}, {"alice", 201, 3}, {"alice", 301, 0}, {"bob", 0, 4000}, {"carol", 0, 0}} {
			got, err := tx.AttachmentUsage(ctx, c.owner, c.since)
			if err != nil {
				return err
			}
			if got != c.want {
				t.Errorf("AttachmentUsage(%s, %d) = %d, want %d", c.owner, c.since, got, c.want)
			}
		}
		return nil
	})
}

func testAttachmentAppendCounts(t *testing.T, s store.Store) {
	appendFixture(t, s)
	completeAttachments(t, s, "alice", "a_1")
	first := mustAppend(t, s, carrying("c1", "alice", "k1", "a_1"))
	if first.Message.AttachmentID != "a_1" {
		t.Errorf("appended AttachmentID %q, want a_1", first.Message.AttachmentID)
	}
	wantRefs(t, "after one append", s, "a_1", 1, 0)
	if dup := mustAppend(t, s, carrying("c1", "alice", "k1", "a_1")); !dup.Duplicate {
		t.Fatalf("the same client id again: not a duplicate")
	}
	wantRefs(t, "after a duplicate", s, "a_1", 1, 0)
	mustAppend(t, s, newAppend("c1", "alice", "plain"))
	mustAppend(t, s, carrying("c1", "alice", "k2", "a_1"))
	wantRefs(t, "after a second append", s, "a_1", 2, 0)
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		m, err := tx.Message(ctx, "c1", 1)
		if err != nil {
			return err
		}
		if m.AttachmentID != "a_1" {
			t.Errorf("Message: AttachmentID %q, want a_1", m.AttachmentID)
		}
		m, err = tx.MessageByClientID(ctx, "alice", "k2")
		if err != nil {
			return err
		}
		if m.AttachmentID != "a_1" || m.Seq != 3 {
			t.Errorf("MessageByClientID: seq %d AttachmentID %q, want 3 and a_1", m.Seq, m.AttachmentID)
		}
		ms, err := tx.Messages(ctx, "c1", store.MessageRange{Limit: 10})
		if err != nil {
			return err
		}
		var ids []string
		for _, m := range ms {
			ids = append(ids, m.AttachmentID)
		}
		if want := []string{"a_1", "", "a_1"}; !slices.Equal(ids, want) {
			t.Errorf("Messages: AttachmentIDs %q, want %q", ids, want)
		}
		return nil
	})
	if got, want := allRefs(t, s, "a_1", 10), []store.MessageRef{{ConvID: "c1", Seq: 1}, {ConvID: "c1", Seq: 3}}; !slices.Equal(got, want) {
		t.Errorf("AttachmentRefs: %v, want %v", got, want)
	}
}

func testAttachmentAppendRefuses(t *testing.T, s store.Store) {
	appendFixture(t, s)
	completeAttachments(t, s, "bob", "a_bobs")
	completeAttachments(t, s, "alice", "a_gone")
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		if err := tx.CreateAttachment(ctx, newAttachment("a_partial", "alice", 10)); err != nil {
			return err
		}
		ok, err := tx.MarkAttachmentDeleting(ctx, "a_gone", attachmentAt+1)
		if err == nil && !ok {
			t.Errorf("MarkAttachmentDeleting of an idle attachment: false")
		}
		return err
	})
	for _, c := range []struct{ what, id string }{
		{"an unknown attachment", "a_none"},
		{"another user's attachment", "a_bobs"},
		{"an attachment still uploading", "a_partial"},
		{"an attachment being deleted", "a_gone"},
	} {
		_, err := s.AppendMessage(t.Context(), carrying("c1", "alice", "k-"+c.id, c.id))
		wantErr(t, "append of "+c.what, err, store.ErrBadAttachment)
	}
	_, err := s.AppendMessage(t.Context(), carrying("c1", "carol", "k-carol", "a_none"))
	wantErr(t, "append by a non-member with an unknown attachment", err, store.ErrNotMember)
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		c, err := tx.Conversation(ctx, "c1")
		if err != nil {
			return err
		}
		if c.MaxSeq != 0 {
			t.Errorf("refused appends took seqs: MaxSeq %d", c.MaxSeq)
		}
		_, err = tx.MessageByClientID(ctx, "alice", "k-a_bobs")
		wantErr(t, "the refused message", err, store.ErrNotFound)
		return nil
	})
	wantRefs(t, "another user's attachment", s, "a_bobs", 0, attachmentAt)
	// The refusal left the conversation usable.
	if res := mustAppend(t, s, newAppend("c1", "alice", "after")); res.Message.Seq != 1 {
		t.Errorf("append after refusals: seq %d, want 1", res.Message.Seq)
	}
}

func testAttachmentRecallUncounts(t *testing.T, s store.Store) {
	appendFixture(t, s)
	completeAttachments(t, s, "alice", "a_1")
	mustAppend(t, s, carrying("c1", "alice", "k1", "a_1"))
	mustAppend(t, s, carrying("c1", "alice", "k2", "a_1"))
	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.RecallMessage(ctx, "c1", 1, 5000) })
	wantRefs(t, "after one of two recalled", s, "a_1", 1, 0)
	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.RecallMessage(ctx, "c1", 1, 6000) })
	wantRefs(t, "after the same recalled again", s, "a_1", 1, 0)
	if got, want := allRefs(t, s, "a_1", 10), []store.MessageRef{{ConvID: "c1", Seq: 2}}; !slices.Equal(got, want) {
		t.Errorf("AttachmentRefs after a recall: %v, want %v", got, want)
	}
	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.RecallMessage(ctx, "c1", 2, 7000) })
	wantRefs(t, "after both recalled", s, "a_1", 0, 7000)
	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.RecallMessage(ctx, "c1", 2, 8000) })
	wantRefs(t, "after the last recalled again", s, "a_1", 0, 7000)
	if got := allRefs(t, s, "a_1", 10); len(got) != 0 {
		t.Errorf("AttachmentRefs after every recall: %v, want none", got)
	}
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		m, err := tx.Message(ctx, "c1", 2)
		if err != nil {
			return err
		}
		if !m.Recalled || m.AttachmentID != "a_1" || m.Content != nil {
			t.Errorf("recalled message: Recalled %v AttachmentID %q Content %q, want true, a_1, nil", m.Recalled, m.AttachmentID, m.Content)
		}
		return nil
	})
	// Sent again after every recall: counted again, no longer idle.
	mustAppend(t, s, carrying("c1", "alice", "k3", "a_1"))
	wantRefs(t, "sent again", s, "a_1", 1, 0)
}

func testAttachmentIdle(t *testing.T, s store.Store) {
	appendFixture(t, s)
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for _, a := range []store.Attachment{
			{ID: "a_c", OwnerID: "alice", Size: 1, CreatedAt: 300},
			{ID: "a_b", OwnerID: "alice", Size: 1, CreatedAt: 100},
			{ID: "a_a", OwnerID: "bob", Size: 1, CreatedAt: 100},
			{ID: "a_sent", OwnerID: "alice", Size: 1, CreatedAt: 50},
			{ID: "a_late", OwnerID: "alice", Size: 1, CreatedAt: 900},
		} {
			a.State, a.IdleSince = store.AttachmentUploading, a.CreatedAt
			if err := tx.CreateAttachment(ctx, a); err != nil {
				return err
			}
		}
		return tx.CompleteAttachment(ctx, "a_sent", attachmentMeta)
	})
	mustAppend(t, s, carrying("c1", "alice", "k1", "a_sent"))
	idle := func(before int64, limit int) []string {
		var ids []string
		view(t, s, func(ctx context.Context, tx store.ReadTx) error {
			as, err := tx.IdleAttachments(ctx, before, limit)
			for _, a := range as {
				ids = append(ids, a.ID)
			}
			return err
		})
		return ids
	}
	if got, want := idle(900, 10), []string{"a_a", "a_b", "a_c"}; !slices.Equal(got, want) {
		t.Errorf("IdleAttachments(900): %v, want %v", got, want)
	}
	if got, want := idle(901, 2), []string{"a_a", "a_b"}; !slices.Equal(got, want) {
		t.Errorf("IdleAttachments(901, limit 2): %v, want %v", got, want)
	}
	if got := idle(100, 10); len(got) != 0 {
		t.Errorf("IdleAttachments(100): %v, want none (idle since 100 is not before 100)", got)
	}
}

func testAttachmentMarkDeleting(t *testing.T, s store.Store) {
	appendFixture(t, s)
	completeAttachments(t, s, "alice", "a_idle", "a_sent")
	mustAppend(t, s, carrying("c1", "alice", "k1", "a_sent"))
	mark := func(id string, before int64) (bool, error) {
		var ok bool
		err := s.Update(t.Context(), func(tx store.Tx) error {
			var err error
			ok, err = tx.MarkAttachmentDeleting(t.Context(), id, before)
			return err
		})
		return ok, err
	}
	if ok, err := mark("a_idle", attachmentAt); err != nil || ok {
		t.Errorf("MarkAttachmentDeleting idle since exactly before: %v %v, want false", ok, err)
	}
	if ok, err := mark("a_sent", attachmentAt+1_000_000); err != nil || ok {
		t.Errorf("MarkAttachmentDeleting of a sent attachment: %v %v, want false", ok, err)
	}
	if ok, err := mark("a_idle", attachmentAt+1); err != nil || !ok {
		t.Errorf("MarkAttachmentDeleting of an idle attachment: %v %v, want true", ok, err)
	}
	if got := readAttachment(t, s, "a_idle"); got.State != store.AttachmentDeleting {
		t.Errorf("state after MarkAttachmentDeleting: %d, want deleting", got.State)
	}
	if ok, err := mark("a_idle", 0); err != nil || !ok {
		t.Errorf("MarkAttachmentDeleting of one already deleting: %v %v, want true", ok, err)
	}
	if _, err := mark("a_none", attachmentAt+1); err == nil {
		t.Errorf("MarkAttachmentDeleting of an unknown id: no error")
	} else {
		wantErr(t, "MarkAttachmentDeleting of an unknown id", err, store.ErrNotFound)
	}
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		wantErr(t, "CompleteAttachment of one deleting", tx.CompleteAttachment(ctx, "a_idle", attachmentMeta), store.ErrNotFound)
		return nil
	})
	if got := readAttachment(t, s, "a_sent"); got.State != store.AttachmentComplete || got.Refs != 1 {
		t.Errorf("the sent attachment: state %d refs %d, want complete and 1", got.State, got.Refs)
	}
}

func testAttachmentRefsPaged(t *testing.T, s store.Store) {
	createUsers(t, s, "alice", "bob")
	convs := []string{"c3", "c1", "c2"}
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for _, id := range convs {
			c := newConversation(id)
			c.MaxSeq = 0
			if err := tx.CreateConversation(ctx, c); err != nil {
				return err
			}
			if err := tx.PutMember(ctx, store.Member{ConvID: id, UserID: "alice", Ordinal: 1, JoinedAt: 1}); err != nil {
				return err
			}
		}
		return nil
	})
	completeAttachments(t, s, "alice", "a_1", "a_other")
	var want []store.MessageRef
	for _, conv := range convs {
		for i := range 3 {
			mustAppend(t, s, carrying(conv, "alice", fmt.Sprintf("%s-%d", conv, i), "a_1"))
			mustAppend(t, s, carrying(conv, "alice", fmt.Sprintf("%s-o%d", conv, i), "a_other"))
			want = append(want, store.MessageRef{ConvID: conv, Seq: int64(2*i + 1)})
		}
	}
	slices.SortFunc(want, func(a, b store.MessageRef) int {
		return cmp.Or(strings.Compare(a.ConvID, b.ConvID), cmp.Compare(a.Seq, b.Seq))
	})
	for _, limit := range []int{1, 2, 4, 100} {
		if got := allRefs(t, s, "a_1", limit); !slices.Equal(got, want) {
			t.Errorf("AttachmentRefs in pages of %d: %v, want %v", limit, got, want)
		}
	}
	wantRefs(t, "a_1", s, "a_1", 9, 0)
}

func testAttachmentReadFanout(t *testing.T, s store.Store) {
	mentionsFixture(t, s)
	completeAttachments(t, s, "alice", "a_1")
	res := mustAppend(t, s, carrying("r", "alice", "k1", "a_1"))
	if !res.ReadFanout || res.Message.Seq != 1 {
		t.Fatalf("append to the read-fanout conversation: %+v", res)
	}
	wantRefs(t, "after a read-fanout append", s, "a_1", 1, 0)
	_, err := s.AppendMessage(t.Context(), carrying("r", "bob", "k2", "a_1"))
	wantErr(t, "bob sending alice's attachment", err, store.ErrBadAttachment)
	if got, want := allRefs(t, s, "a_1", 10), []store.MessageRef{{ConvID: "r", Seq: 1}}; !slices.Equal(got, want) {
		t.Errorf("AttachmentRefs: %v, want %v", got, want)
	}
}

// testAttachmentConcurrent sends and recalls one attachment from many goroutines at once:
// the count must come out exact, since the collector deletes at zero.
func testAttachmentConcurrent(t *testing.T, s store.Store) {
	mentionsFixture(t, s)
	completeAttachments(t, s, "alice", "a_1")
	const senders, each = 4, 10
	var wg sync.WaitGroup
	errs := make(chan error, senders*each)
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conv := []string{"w", "r"}[g%2]
			for i := range each {
				if _, err := s.AppendMessage(context.Background(), carrying(conv, "alice", fmt.Sprintf("g%d-%d", g, i), "a_1")); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent append: %v", err)
	}
	wantRefs(t, "after concurrent appends", s, "a_1", senders*each, 0)
	var recalls sync.WaitGroup
	for _, conv := range []string{"w", "r"} {
		for seq := int64(1); seq <= senders*each/2; seq++ {
			recalls.Add(1)
			go func() {
				defer recalls.Done()
				err := s.Update(context.Background(), func(tx store.Tx) error { return tx.RecallMessage(context.Background(), conv, seq, 9000) })
				if err != nil {
					t.Errorf("recall %s/%d: %v", conv, seq, err)
				}
			}()
		}
	}
	recalls.Wait()
	wantRefs(t, "after every message recalled concurrently", s, "a_1", 0, 9000)
}

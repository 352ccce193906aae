package pebble

import (
	"context"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/store"
)

func TestMessageCodecAttachment(t *testing.T) {
	base := store.Message{ConvID: "c", Seq: 7, MsgID: "m", ClientMsgID: "k", SenderID: "alice", ContentType: 2, Content: []byte("x"), CreatedAt: 5}
	plain := encodeMessage(nil, base)
	for _, m := range []store.Message{
		base,
		func() store.Message { m := base; m.AttachmentID = "a_1"; return m }(),
		func() store.Message { m := base; m.Mentions = []string{"bob", "carol"}; return m }(),
		func() store.Message { m := base; m.Mentions, m.AttachmentID = []string{"bob"}, "a_1"; return m }(),
		func() store.Message { m := base; m.Recalled, m.Content, m.AttachmentID = true, nil, "a_1"; return m }(),
	} {
		v := encodeMessage(nil, m)
		got, err := decodeMessage(v, m.ConvID, m.Seq)
		if err != nil || !reflect.DeepEqual(got, m) {
			t.Errorf("round trip of %+v: %+v, %v", m, got, err)
		}
		if m.AttachmentID == "" && len(m.Mentions) == 0 && string(v) != string(plain) {
			t.Errorf("a message without attachment or mentions changed its bytes")
		}
	}
	// A row of an earlier version, without the attachment, reads as none; the
	// non-canonical forms do not read.
	if got, err := decodeMessage(plain, "c", 7); err != nil || got.AttachmentID != "" {
		t.Errorf("earlier row: %+v, %v", got, err)
	}
	for name, v := range map[string][]byte{
		"an empty mention list alone": append(append([]byte(nil), plain...), 0),
		"an empty attachment id":      append(append([]byte(nil), plain...), 0, 0),
	} {
		if _, err := decodeMessage(v, "c", 7); err == nil {
			t.Errorf("%s decoded", name)
		}
	}
}

// TestAttachmentSameBatch sends one attachment twice in one batch: the second append must
// see the first's count, from the writer's memory, and the indexes follow.
func TestAttachmentSameBatch(t *testing.T) {
	var sawTwo atomic.Bool
	s := openTest(t, Options{OnCommit: func(n int, _ time.Duration) {
		if n == 2 {
			sawTwo.Store(true)
		}
	}})
	ctx := t.Context()
	err := s.Update(ctx, func(tx store.Tx) error {
		if err := tx.CreateUser(ctx, store.User{ID: "alice", Name: "Alice"}); err != nil {
			return err
		}
		if err := tx.CreateConversation(ctx, store.Conversation{ID: "c1", Type: "group", MembersCount: 1}); err != nil {
			return err
		}
		if err := tx.PutMember(ctx, store.Member{ConvID: "c1", UserID: "alice", Ordinal: 1}); err != nil {
			return err
		}
		if err := tx.CreateAttachment(ctx, store.Attachment{ID: "a_1", OwnerID: "alice", Size: 10, CreatedAt: 100}); err != nil {
			return err
		}
		return tx.CompleteAttachment(ctx, "a_1", store.AttachmentMeta{MimeType: "image/png"})
	})
	if err != nil {
		t.Fatal(err)
	}
	msg := func(k string) store.Message {
		return store.Message{ConvID: "c1", SenderID: "alice", ClientMsgID: k, MsgID: "m" + k, ContentType: 2, CreatedAt: 200, AttachmentID: "a_1"}
	}
	// Hold the writer until both appends are queued: they then make one batch.
	release, held, holding := make(chan struct{}), make(chan error, 1), make(chan struct{})
	go func() {
		held <- s.Update(context.Background(), func(store.Tx) error { close(holding); <-release; return nil })
	}()
	<-holding // the writer is inside the Update: the appends below queue behind it
	var pending []store.PendingAppend
	for _, k := range []string{"k1", "k2"} {
		p, err := s.StartAppend(ctx, msg(k))
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, p)
	}
	// StartAppend returned, so both are queued (its contract); the queue is the writer's to
	// take as one batch once released.
	close(release)
	for _, p := range pending {
		if _, err := p.Wait(); err != nil {
			t.Fatalf("append: %v", err)
		}
	}
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if !sawTwo.Load() {
		t.Log("the appends did not share a batch")
	}
	checkAttachment := func(what string, refs, idleSince int64, idle bool) {
		t.Helper()
		err := s.View(ctx, func(tx store.ReadTx) error {
			a, err := tx.Attachment(ctx, "a_1")
			if err != nil {
				return err
			}
			if a.Refs != refs || a.IdleSince != idleSince {
				t.Errorf("%s: Refs %d IdleSince %d, want %d and %d", what, a.Refs, a.IdleSince, refs, idleSince)
			}
			as, err := tx.IdleAttachments(ctx, 1<<62, 10)
			if err != nil {
				return err
			}
			if got := len(as) == 1; got != idle {
				t.Errorf("%s: idle entries %v, want one: %v", what, as, idle)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	checkAttachment("after two appends in a batch", 2, 0, false)
	for seq, at := range map[int64]int64{1: 300, 2: 400} {
		if err := s.Update(ctx, func(tx store.Tx) error { return tx.RecallMessage(ctx, "c1", seq, at) }); err != nil {
			t.Fatal(err)
		}
	}
	a := func() store.Attachment {
		var a store.Attachment
		_ = s.View(ctx, func(tx store.ReadTx) (err error) { a, err = tx.Attachment(ctx, "a_1"); return err })
		return a
	}()
	checkAttachment("after both recalled", 0, a.IdleSince, true)
	if a.IdleSince != 300 && a.IdleSince != 400 {
		t.Errorf("IdleSince %d, want the last recall's", a.IdleSince)
	}
	if err := s.Update(ctx, func(tx store.Tx) error { return tx.DeleteAttachment(ctx, "a_1") }); err != nil {
		t.Fatal(err)
	}
	for _, prefix := range []byte{tAttachment, tAttachmentUsage, tAttachmentIdle, tAttachmentRef} {
		it, err := s.db.NewIter(nil)
		if err != nil {
			t.Fatal(err)
		}
		for valid := it.SeekGE([]byte{prefix}); valid && it.Key()[0] == prefix; valid = it.Next() {
			t.Errorf("after DeleteAttachment: key %q left", it.Key())
		}
		_ = it.Close()
	}
}

package storetest

import (
	"context"
	"reflect"
	"slices"
	"testing"

	"github.com/parleychat/parley/internal/store"
)

// insertMessages stores messages 1..n of convID, sent by alice.
func insertMessages(t testing.TB, s store.Store, convID string, n int64) {
	t.Helper()
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for seq := int64(1); seq <= n; seq++ {
			if err := tx.InsertMessage(ctx, newMessage(convID, seq, "alice")); err != nil {
				return err
			}
		}
		return nil
	})
}

func testMessageInsertAndLookup(t *testing.T, s store.Store) {
	full := newMessage("c1", 1, "alice")
	bare := newMessage("c1", 2, "bob")
	bare.Extra = nil
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		if err := tx.InsertMessage(ctx, full); err != nil {
			return err
		}
		return tx.InsertMessage(ctx, bare)
	})
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		for _, want := range []store.Message{full, bare} {
			got, err := tx.Message(ctx, want.ConvID, want.Seq)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("Message(%d) = %+v, %v; want %+v", want.Seq, got, err, want)
			}
			got, err = tx.MessageByClientID(ctx, want.SenderID, want.ClientMsgID)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("MessageByClientID(%q) = %+v, %v; want %+v", want.ClientMsgID, got, err, want)
			}
		}
		_, err := tx.Message(ctx, "c1", 3)
		wantErr(t, "Message of an unknown seq", err, store.ErrNotFound)
		_, err = tx.MessageByClientID(ctx, "bob", full.ClientMsgID)
		wantErr(t, "MessageByClientID of another sender", err, store.ErrNotFound)
		return nil
	})
}

func testMessageUniqueness(t *testing.T, s store.Store) {
	insertMessages(t, s, "c1", 1)
	orig := newMessage("c1", 1, "alice")
	sameSeq := newMessage("c1", 1, "bob")
	sameSeq.MsgID, sameSeq.ClientMsgID = "other-msg", "other-cli"
	sameClient := newMessage("c2", 2, "alice")
	sameClient.ClientMsgID = orig.ClientMsgID
	otherSender := newMessage("c2", 3, "bob")
	otherSender.ClientMsgID = orig.ClientMsgID
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		wantErr(t, "InsertMessage with a taken (conv, seq)", tx.InsertMessage(ctx, sameSeq), store.ErrExists)
		wantErr(t, "InsertMessage with a taken (sender, client_msg_id)",
			tx.InsertMessage(ctx, sameClient), store.ErrExists)
		return tx.InsertMessage(ctx, otherSender)
	})
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		if got, err := tx.Message(ctx, "c1", 1); err != nil || !reflect.DeepEqual(got, orig) {
			t.Errorf("Message after conflicts = %+v, %v; want the original", got, err)
		}
		if got, err := tx.MessageByClientID(ctx, "bob", orig.ClientMsgID); err != nil || got.Seq != 3 {
			t.Errorf("same client_msg_id from another sender = %+v, %v; want stored", got, err)
		}
		for _, seq := range []int64{1, 2} {
			_, err := tx.Message(ctx, "c2", seq)
			wantErr(t, "Message of a rejected insert", err, store.ErrNotFound)
		}
		return nil
	})
}

func testMessageRanges(t *testing.T, s store.Store) {
	insertMessages(t, s, "c1", 10)
	insertMessages(t, s, "c2", 3)
	tests := []struct {
		name string
		r    store.MessageRange
		want []int64
	}{
		{"first page", store.MessageRange{Limit: 3}, []int64{1, 2, 3}},
		{"after", store.MessageRange{AfterSeq: 5, Limit: 3}, []int64{6, 7, 8}},
		{"after to the end", store.MessageRange{AfterSeq: 8, Limit: 50}, []int64{9, 10}},
		{"after the end", store.MessageRange{AfterSeq: 10, Limit: 50}, nil},
		{"floor above after", store.MessageRange{Floor: 4, AfterSeq: 2, Limit: 2}, []int64{5, 6}},
		{"after above floor", store.MessageRange{Floor: 4, AfterSeq: 7, Limit: 50}, []int64{8, 9, 10}},
		{"floor is exclusive", store.MessageRange{Floor: 9, Limit: 50}, []int64{10}},
		{"before", store.MessageRange{BeforeSeq: 8, Limit: 3}, []int64{5, 6, 7}},
		{"before past the start", store.MessageRange{BeforeSeq: 3, Limit: 5}, []int64{1, 2}},
		{"before above the end", store.MessageRange{BeforeSeq: 100, Limit: 2}, []int64{9, 10}},
		{"before and floor", store.MessageRange{Floor: 5, BeforeSeq: 8, Limit: 5}, []int64{6, 7}},
		{"before at the floor", store.MessageRange{Floor: 5, BeforeSeq: 6, Limit: 5}, nil},
		{"before the first", store.MessageRange{BeforeSeq: 1, Limit: 5}, nil},
	}
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		for _, tc := range tests {
			ms, err := tx.Messages(ctx, "c1", tc.r)
			if err != nil {
				t.Errorf("%s: Messages(%+v): %v", tc.name, tc.r, err)
				continue
			}
			var got []int64
			for _, m := range ms {
				if m.ConvID != "c1" {
					t.Errorf("%s: message of conversation %q", tc.name, m.ConvID)
				}
				got = append(got, m.Seq)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("%s: Messages(%+v) seqs = %v, want %v", tc.name, tc.r, got, tc.want)
			}
		}
		if ms, err := tx.Messages(ctx, "none", store.MessageRange{Limit: 5}); err != nil || len(ms) != 0 {
			t.Errorf("Messages of an unknown conversation = %v, %v; want empty", ms, err)
		}
		return nil
	})
}

func testMessageRecall(t *testing.T, s store.Store) {
	insertMessages(t, s, "c1", 2)
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		wantErr(t, "RecallMessage of an unknown seq", tx.RecallMessage(ctx, "c1", 3, 1_700_000_009_000), store.ErrNotFound)
		return tx.RecallMessage(ctx, "c1", 1, 1_700_000_009_000)
	})
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		if err := tx.RecallMessage(ctx, "c1", 1, 1_700_000_009_000); err != nil {
			t.Errorf("RecallMessage twice: %v, want success", err)
		}
		return nil
	})
	want := newMessage("c1", 1, "alice")
	want.Content, want.Extra, want.Recalled = nil, nil, true
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		if got, err := tx.Message(ctx, "c1", 1); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("recalled Message = %+v, %v; want %+v", got, err, want)
		}
		if got, err := tx.Message(ctx, "c1", 2); err != nil || got.Recalled || got.Content == nil {
			t.Errorf("other Message = %+v, %v; want untouched", got, err)
		}
		return nil
	})
}

package storetest

import (
	"context"
	"reflect"
	"testing"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// testEventsInterleavedMessages reads a log whose message events interleave several
// conversations out of key order (as a device's log does when its conversations are busy at
// once), with a message that does not exist and events of other types between them, in pages
// that cut through the runs: every event must carry its own message, in cursor order.
func testEventsInterleavedMessages(t *testing.T, s store.Store) {
	createUsers(t, s, "alice", "bob")
	convs := []string{"c3", "c1", "c2"} // the log visits them in this order
	var want []*store.Message
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for seq := int64(1); seq <= 5; seq++ {
			for _, c := range convs {
				m := newMessage(c, seq, "alice")
				if c == "c2" && seq == 3 {
					want = append(want, nil) // referenced, never stored
				} else {
					if err := tx.InsertMessage(ctx, m); err != nil {
						return err
					}
					want = append(want, &m)
				}
				if _, err := tx.AppendEvent(ctx, messageEvent("bob", c, seq, 100+seq)); err != nil {
					return err
				}
			}
			if _, err := tx.AppendEvent(ctx, readEvent("bob", 200+seq)); err != nil {
				return err
			}
			want = append(want, nil)
		}
		return nil
	})
	var got []store.Event
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		for after := int64(0); ; {
			page, err := tx.Events(ctx, "bob", after, 7)
			if err != nil || len(page) == 0 {
				return err
			}
			got = append(got, page...)
			after = page[len(page)-1].Cursor
		}
	})
	wantCursors(t, got, 1, int64(len(want)))
	for i, e := range got {
		if !reflect.DeepEqual(e.Message, want[i]) {
			t.Errorf("event %d (%s %s/%d) Message = %+v, want %+v", e.Cursor, e.Type, e.ConvID, e.Seq, e.Message, want[i])
		}
		if e.Type == protocol.EventMessage && e.Message != nil && (e.Message.ConvID != e.ConvID || e.Message.Seq != e.Seq) {
			t.Errorf("event %d of %s/%d carries message %s/%d", e.Cursor, e.ConvID, e.Seq, e.Message.ConvID, e.Message.Seq)
		}
	}
}

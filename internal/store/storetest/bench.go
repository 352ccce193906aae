package storetest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// Bench runs the store benchmarks. open must return a fresh, empty store per benchmark
// and close it at the benchmark's cleanup.
//
// AppendMessage is the write of one send in a two-member conversation, as chat makes it:
// one Store.AppendMessage (dedup, seq, the message, both members' events, the sender's
// positions). Serial measures commit latency; Parallel runs many senders at once, where a
// group-committing backend shares one sync among them. Both report msgs/s.
func Bench(b *testing.B, open func(b *testing.B) store.Store) {
	b.Run("AppendMessage/Serial", func(b *testing.B) { benchAppend(b, open(b), false) })
	b.Run("AppendMessage/Parallel", func(b *testing.B) { benchAppend(b, open(b), true) })
	b.Run("Events100", func(b *testing.B) { benchEvents(b, open(b), false) })
	b.Run("Events100/Parallel", func(b *testing.B) { benchEvents(b, open(b), true) })
}

// benchMembers returns the members of the benchmark conversation.
func benchMembers() [2]string { return [2]string{"alice", "bob"} }

// setupConversation creates the benchmark users and their conversation "c1".
func setupConversation(b *testing.B, s store.Store) {
	b.Helper()
	members := benchMembers()
	createUsers(b, s, members[:]...)
	update(b, s, func(ctx context.Context, tx store.Tx) error {
		if err := tx.CreateConversation(ctx, newConversation("c1")); err != nil {
			return err
		}
		for i, u := range members {
			if err := tx.PutMember(ctx, store.Member{ConvID: "c1", UserID: u, Ordinal: int64(i)}); err != nil {
				return err
			}
		}
		return nil
	})
}

// send appends message n from alice to "c1".
func send(ctx context.Context, s store.Store, n int64) error {
	_, err := s.AppendMessage(ctx, store.Message{
		ConvID: "c1", MsgID: fmt.Sprint("m", n), ClientMsgID: fmt.Sprint("c", n),
		SenderID: "alice", ContentType: 1, Content: []byte(`{"text":"hello, world"}`), CreatedAt: n,
	})
	return err
}

func benchAppend(b *testing.B, s store.Store, parallel bool) {
	setupConversation(b, s)
	ctx := b.Context()
	var n atomic.Int64
	one := func() error {
		id := n.Add(1)
		return send(ctx, s, id)
	}
	b.ReportAllocs()
	b.ResetTimer()
	if parallel {
		b.SetParallelism(16) // senders wait on the disk, not the CPU
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := one(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	} else {
		for b.Loop() {
			if err := one(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

func benchEvents(b *testing.B, s store.Store, parallel bool) {
	setupConversation(b, s)
	for i := range int64(100) {
		if err := send(b.Context(), s, i+1); err != nil {
			b.Fatal(err)
		}
	}
	update(b, s, func(ctx context.Context, tx store.Tx) error {
		_, err := tx.AppendEvent(ctx, store.Event{UserID: "bob", Type: protocol.EventRead, TS: 1})
		return err
	})
	ctx := b.Context()
	read := func() error {
		return s.View(ctx, func(tx store.ReadTx) error {
			es, err := tx.Events(ctx, "bob", 0, 100)
			if err == nil && (len(es) != 100 || es[99].Message == nil) {
				err = fmt.Errorf("read %d events, want 100 message events", len(es))
			}
			return err
		})
	}
	b.ReportAllocs()
	b.ResetTimer()
	if parallel {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := read(); err != nil {
					b.Error(err)
					return
				}
			}
		})
		return
	}
	for b.Loop() {
		if err := read(); err != nil {
			b.Fatal(err)
		}
	}
}

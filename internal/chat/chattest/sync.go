package chattest

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// Sizes of the catch-up that BenchSync measures: issue 8's reconnect figure, a device that
// was offline while SyncMessages messages arrived in SyncConvs direct conversations.
const (
	SyncMessages = 10_000
	SyncConvs    = 200
)

// BenchSync benchmarks the read path of a reconnecting device: chat.Service.Sync, page after
// page of protocol.MaxSyncLimit events (the WebSocket catch-up's page), from the device's
// last cursor until the log has no more. The log holds SyncMessages message events,
// interleaved over SyncConvs direct conversations as concurrent senders leave them, so a
// page references messages of every conversation. open must return a fresh, empty store and
// close it at b's cleanup. One op is one full catch-up; it reports events/s and setup-s.
func BenchSync(b *testing.B, open func(b *testing.B) store.Store) {
	ctx := b.Context()
	start := time.Now()
	svc, me, from, err := setupSync(ctx, open(b))
	if err != nil {
		b.Fatalf("setup: %v", err)
	}
	setupTime := time.Since(start)
	for b.Loop() {
		n, err := catchUp(ctx, svc, me, from)
		if err == nil && n != SyncMessages {
			err = fmt.Errorf("caught up %d events, want %d", n, SyncMessages)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*SyncMessages)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(setupTime.Seconds(), "setup-s")
}

// catchUp reads every event after cursor as the WebSocket catch-up does, checking that the
// cursors are gapless and each message event carries its payload, and returns their number.
func catchUp(ctx context.Context, svc *chat.Service, me chat.Identity, cursor int64) (int, error) {
	n := 0
	for {
		resp, err := svc.Events(ctx, me, cursor, protocol.MaxSyncLimit)
		if err != nil {
			return n, err
		}
		for _, ev := range resp.Events {
			if ev.Cursor != cursor+1 {
				return n, fmt.Errorf("cursor %d after %d", ev.Cursor, cursor)
			}
			if ev.Type != protocol.EventMessage || len(ev.Data) < 2 || ev.Data[0] != '{' {
				return n, fmt.Errorf("event %d: type %q, data %q", ev.Cursor, ev.Type, ev.Data)
			}
			cursor = ev.Cursor
			n++
		}
		if !resp.HasMore {
			return n, nil
		}
	}
}

// setupSync creates user "me" and SyncConvs peers, a direct conversation with each, and
// sends SyncMessages messages from the peers, Senders at a time, message i into conversation
// i mod SyncConvs. It returns me's cursor from before the messages.
func setupSync(ctx context.Context, st store.Store) (*chat.Service, chat.Identity, int64, error) {
	svc := chat.New(chat.Options{Store: st, Config: chat.DefaultConfig()})
	me := chat.Identity{UserID: "me", DeviceID: "phone"}
	if _, _, err := svc.CreateUser(ctx, me.UserID, ""); err != nil {
		return nil, me, 0, err
	}
	peers := make([]string, SyncConvs)
	convs := make([]string, SyncConvs)
	err := concurrently(SyncConvs, func(i int) error {
		peers[i] = "p" + strconv.Itoa(i)
		if _, _, err := svc.CreateUser(ctx, peers[i], ""); err != nil {
			return err
		}
		b, err := svc.CreateConversation(ctx, chat.Identity{UserID: peers[i], DeviceID: "bench"},
			protocol.CreateConversationRequest{Type: protocol.TypeDirect, PeerID: me.UserID})
		convs[i] = b.ConvID
		return err
	})
	if err != nil {
		return nil, me, 0, err
	}
	from, err := svc.LatestCursor(ctx, me.UserID)
	if err != nil {
		return nil, me, 0, err
	}
	err = concurrently(SyncMessages, func(i int) error {
		c := i % SyncConvs
		_, err := svc.Send(ctx, chat.Identity{UserID: peers[c], DeviceID: "bench"}, protocol.SendRequest{
			ConvID: convs[c], ClientMsgID: "s" + strconv.Itoa(i),
			ContentType: 1, Content: []byte(`{"text":"m` + strconv.Itoa(i) + `"}`),
		})
		return err
	})
	return svc, me, from, err
}

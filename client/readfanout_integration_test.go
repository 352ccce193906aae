package client_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/internal/parleytest"
	"github.com/parleychat/parley/internal/server"
	"github.com/parleychat/parley/protocol"
)

// device is one SDK session of a user, recording the messages of one conversation it was
// handed (in order) and the latest state of that conversation.
type device struct {
	c      *client.Client
	conv   string
	mu     sync.Mutex // guards seqs and brief
	seqs   []int64
	brief  client.ConversationBrief
	change chan struct{} // a message or a brief arrived
}

func newDevice(t *testing.T, s *parleytest.Server, token, userID, conv string) *device {
	t.Helper()
	d := &device{conv: conv, change: make(chan struct{}, 1)}
	wake := func() {
		select {
		case d.change <- struct{}{}:
		default:
		}
	}
	d.c = client.New(client.Options{
		BaseURL: s.URL, Token: token, UserID: userID, PullDelayMax: 50 * time.Millisecond,
		OnEvent: func(ev client.SyncEvent) {
			if m, err := ev.Message(); err == nil && m.ConvID == conv {
				d.mu.Lock()
				d.seqs = append(d.seqs, m.Seq)
				d.mu.Unlock()
				wake()
			}
		},
		OnConversation: func(b client.ConversationBrief) {
			if b.ConvID == conv {
				d.mu.Lock()
				d.brief = b
				d.mu.Unlock()
				wake()
			}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.c.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.c.Close() })
	return d
}

// await waits, bounded by a deadline, until cond holds of the device's state.
func (d *device) await(t *testing.T, what string, cond func(seqs []int64, b client.ConversationBrief) bool) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		d.mu.Lock()
		ok := cond(d.seqs, d.brief)
		seqs, b := append([]int64(nil), d.seqs...), d.brief
		d.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-d.change:
		case <-deadline:
			t.Fatalf("timed out waiting for %s: seqs %v, brief max_seq %d read_seq %d unread %d", what, seqs, b.MaxSeq, b.ReadSeq, b.Unread)
		}
	}
}

// TestReadFanoutSDKAgainstServer: in a group switched to read fanout (--write-fanout-max 2),
// one device of bob's has the conversation open (pushes) and another has not (notices, then
// history); both get every message once, in seq order, as message events like any other,
// and both show the server's unread count, also after bob reads on one of them.
func TestReadFanoutSDKAgainstServer(t *testing.T) {
	s := parleytest.Start(t, func(c *server.Config) {
		c.Chat.WriteFanoutMax = 2
		c.Gateway.SendRate = 0
		c.Gateway.RequestRate = 0
		c.Gateway.ConvCreateEvery = 0
		c.Gateway.PullDelayMax = 100 * time.Millisecond
	})
	aliceTok := s.User(t, "alice")
	bobTok := s.User(t, "bob")
	bobTok2 := s.Token(t, "bob", "d2")
	s.User(t, "carol")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	alice := client.New(client.Options{BaseURL: s.URL, Token: aliceTok})
	g, err := alice.CreateGroup(ctx, "all hands", []string{"bob", "carol"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if g.Fanout != protocol.FanoutRead {
		t.Fatalf("group of 3 with --write-fanout-max 2 has fanout %q", g.Fanout)
	}
	open := newDevice(t, s, bobTok, "bob", g.ConvID)
	closed := newDevice(t, s, bobTok2, "bob", g.ConvID)
	if _, err := open.c.OpenConversation(ctx, g.ConvID); err != nil {
		t.Fatal(err)
	}

	// Three senders at once, so pushes and notices race with each other.
	const perSender, senders = 10, 3
	var wg sync.WaitGroup
	for i := range senders {
		wg.Go(func() {
			for j := range perSender {
				if _, err := alice.SendText(ctx, g.ConvID, fmt.Sprintf("m %d.%d", i, j)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	const n = perSender * senders
	all := func(seqs []int64, _ client.ConversationBrief) bool { return len(seqs) >= n }
	for name, d := range map[string]*device{"open device": open, "device with notices": closed} {
		d.await(t, name+": all messages", all)
		d.mu.Lock()
		seqs := append([]int64(nil), d.seqs...)
		d.mu.Unlock()
		for i, seq := range seqs {
			if seq != int64(i+1) {
				t.Fatalf("%s got seqs %v, want 1..%d once each, in order", name, seqs, n)
			}
		}
		d.await(t, name+": unread", func(_ []int64, b client.ConversationBrief) bool { return b.MaxSeq == n && b.Unread == n })
	}

	// Bob reads up to 10 on one device: both show the server's count.
	if _, err := open.c.MarkRead(ctx, g.ConvID, 10); err != nil {
		t.Fatal(err)
	}
	srvBrief, err := client.New(client.Options{BaseURL: s.URL, Token: bobTok}).GetConversation(ctx, g.ConvID)
	if err != nil {
		t.Fatal(err)
	}
	if srvBrief.Unread != n-10 {
		t.Fatalf("server's unread %d after reading 10 of %d", srvBrief.Unread, n)
	}
	for name, d := range map[string]*device{"reading device": open, "other device": closed} {
		d.await(t, name+": unread after the read", func(_ []int64, b client.ConversationBrief) bool {
			return b.ReadSeq == 10 && b.Unread == srvBrief.Unread
		})
	}
	for name, d := range map[string]*device{"open device": open, "device with notices": closed} {
		d.mu.Lock()
		got := len(d.seqs)
		d.mu.Unlock()
		if got != n {
			t.Errorf("%s got %d messages, want %d", name, got, n)
		}
	}
}

package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/internal/parleytest"
	"github.com/parleychat/parley/internal/server"
)

// fastPresence makes the server's presence turn every 20 ms and hold a user's changes
// apart by 50 ms only, so that the test waits on frames for a fraction of a second.
func fastPresence(cfg *server.Config) {
	cfg.Presence.Tick = 20 * time.Millisecond
	cfg.Presence.Coalesce = 50 * time.Millisecond
	cfg.Presence.Grace = 200 * time.Millisecond
	cfg.Presence.Timeout = 2 * time.Second
}

// presenceSession connects a Client whose OnPresence entries go, one by one, to the
// channel it returns.
func presenceSession(t *testing.T, s *parleytest.Server, token, userID string) (*client.Client, <-chan client.Presence) {
	t.Helper()
	got := make(chan client.Presence, 2*client.MaxPresenceSubscriptions) // OnPresence must not block
	c := connected(t, client.Options{BaseURL: s.URL, Token: token, UserID: userID,
		OnPresence: func(ps []client.Presence) {
			for _, p := range ps {
				got <- p
			}
		}})
	return c, got
}

// wantPresence takes the next entry OnPresence received and checks it is user in state.
func wantPresence(t *testing.T, what string, got <-chan client.Presence, user, state string) client.Presence {
	t.Helper()
	select {
	case p := <-got:
		if p.UserID != user || p.State != state {
			t.Fatalf("%s: presence %+v, want %s %s", what, p, user, state)
		}
		return p
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no presence within 10 s", what)
	}
	return client.Presence{}
}

// TestPresenceSDK: a subscription answers the current state at once (and OnPresence gets
// it), alice's coming online and going away arrive as pushes, the HTTP call answers the
// same, and once alice hides she looks to bob exactly as she does to carol, a stranger.
func TestPresenceSDK(t *testing.T) {
	s := parleytest.Start(t, fastPresence)
	aliceTok, bobTok, carolTok := s.User(t, "alice"), s.User(t, "bob"), s.User(t, "carol")
	ctx := context.Background()
	bob, bobGot := presenceSession(t, s, bobTok, "bob")
	if _, err := bob.CreateDirect(ctx, "alice"); err != nil {
		t.Fatal(err)
	}

	now, err := bob.SubscribePresence(ctx, []string{"alice", "carol"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(now) != 2 || now[0] != (client.Presence{UserID: "alice", State: client.PresenceOffline}) ||
		now[1] != (client.Presence{UserID: "carol", State: client.PresenceOffline}) {
		t.Fatalf("subscribe answered %+v, want alice and carol offline", now)
	}
	wantPresence(t, "the answer", bobGot, "alice", client.PresenceOffline)
	wantPresence(t, "the answer", bobGot, "carol", client.PresenceOffline)

	alice, _ := presenceSession(t, s, aliceTok, "alice")
	wantPresence(t, "alice connected", bobGot, "alice", client.PresenceOnline)
	if err := alice.SetAway(ctx, true); err != nil {
		t.Fatal(err)
	}
	away := wantPresence(t, "alice away", bobGot, "alice", client.PresenceAway)
	if _, err := time.Parse(time.RFC3339, away.LastActiveAt); err != nil {
		t.Fatalf("away without a last_active_at: %+v", away)
	}

	ps, err := bob.GetPresence(ctx, []string{"alice", "carol"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0] != away || ps[1] != (client.Presence{UserID: "carol", State: client.PresenceOffline}) {
		t.Fatalf("GET /v1/presence: %+v, want alice %+v and carol offline", ps, away)
	}
	carol := client.New(client.Options{BaseURL: s.URL, Token: carolTok})
	stranger, err := carol.GetPresence(ctx, []string{"alice"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (client.Presence{UserID: "alice", State: client.PresenceOffline}); len(stranger) != 1 || stranger[0] != want {
		t.Fatalf("carol, a stranger, sees %+v, want %+v", stranger, want)
	}

	me, err := alice.SetPresenceHidden(ctx, true)
	if err != nil || me.Presence != "hidden" {
		t.Fatalf("SetPresenceHidden: %+v, %v", me, err)
	}
	wantPresence(t, "alice hidden", bobGot, "alice", client.PresenceOffline)
	if ps, err := bob.GetPresence(ctx, []string{"alice"}); err != nil || fmt.Sprint(ps) != fmt.Sprint(stranger) {
		t.Fatalf("bob sees hidden alice as %+v (%v), want what carol sees: %+v", ps, err, stranger)
	}
	if me, err := alice.SetPresenceHidden(ctx, false); err != nil || me.Presence != "visible" {
		t.Fatalf("SetPresenceHidden(false): %+v, %v", me, err)
	}
	wantPresence(t, "alice visible again", bobGot, "alice", client.PresenceAway)

	if err := bob.UnsubscribePresence(ctx, []string{"alice"}); err != nil {
		t.Fatal(err)
	}
	if err := alice.SetAway(ctx, false); err != nil {
		t.Fatal(err)
	}
	// Were alice still followed, her change would come before, or soon after, this answer:
	// the check cannot flake, though a late push would slip past it.
	if _, err := bob.SubscribePresence(ctx, []string{"carol"}, false); err != nil {
		t.Fatal(err)
	}
	wantPresence(t, "after unsubscribing alice", bobGot, "carol", client.PresenceOffline)

	many := make([]string, client.MaxPresenceSubscriptions)
	for i := range many {
		many[i] = fmt.Sprintf("u%d", i)
	}
	if _, err := bob.SubscribePresence(ctx, many, false); !errors.Is(err, client.ErrTooManyPresence) {
		t.Fatalf("501 users in all: %v, want ErrTooManyPresence", err)
	}
	if _, err := bob.SubscribePresence(ctx, many, true); err != nil {
		t.Fatalf("500 users in place of the set: %v", err)
	}
}

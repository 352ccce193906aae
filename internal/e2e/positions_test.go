package e2e

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"

	"github.com/parleychat/parley/internal/server"
)

// TestPositionsNeverMoveBackwards races read and delivered updates with shuffled seqs from
// several devices (PROTOCOL section 7): the final positions are the maximum, every answer
// is at least the seq asked for (clamped), and the read events in the log strictly increase.
func TestPositionsNeverMoveBackwards(t *testing.T) {
	n := start(t, func(c *server.Config) { c.Gateway.RequestRate = 0 })
	alice, bob := n.user(t, "alice"), n.user(t, "bob")
	convID := n.direct(t, alice, "bob")["conv_id"].(string)
	const msgs, devices = 20, 4
	for i := range msgs {
		n.send(t, alice, convID, fmt.Sprintf("m%d", i))
	}
	before := n.latest(t, bob)
	toks := []string{bob}
	for i := 1; i < devices; i++ {
		toks = append(toks, n.Token(t, "bob", fmt.Sprintf("dev-%d", i)))
	}

	errs := make(chan error, devices)
	var wg sync.WaitGroup
	for d, tok := range toks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			order := rand.Perm(msgs + 5) // seqs 0 .. msgs+4: some beyond max_seq
			for i, seq := range order {
				route, field := "read", "read_seq"
				if (i+d)%3 == 0 {
					route, field = "delivered", "delivered_seq"
				}
				r, err := n.request("POST", "/v1/conversations/"+convID+"/"+route, tok, map[string]any{"seq": seq})
				if err == nil && r.status != http.StatusOK {
					err = fmt.Errorf("%s %d: %d %s", route, seq, r.status, r.raw)
				}
				if err != nil {
					errs <- err
					return
				}
				m, err := decode(r.raw)
				if err != nil {
					errs <- err
					return
				}
				if got := num(m[field]); got < int64(min(seq, msgs)) {
					errs <- fmt.Errorf("%s %d answered %s %d: below the seq asked for", route, seq, field, got)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	wantFields(t, "bob's brief", n.brief(t, bob, convID), map[string]any{"read_seq": msgs, "delivered_seq": msgs, "unread": 0})
	wantFields(t, "alice's brief", n.brief(t, alice, convID), map[string]any{"peer_read_seq": msgs, "peer_delivered_seq": msgs})
	for name, tok := range map[string]string{"alice": alice, "bob": bob} {
		lastRead, lastDelivered := int64(0), int64(0)
		from := int64(0)
		if name == "bob" {
			from = before
		}
		for _, ev := range n.events(t, tok, from) {
			data, _ := ev["data"].(map[string]any)
			switch ev["type"] {
			case "read":
				if r := num(data["read_seq"]); r <= lastRead {
					t.Fatalf("%s's log: read event %d after %d: positions moved backwards or repeated", name, r, lastRead)
				} else {
					lastRead = r
				}
			case "delivered":
				if name == "bob" {
					t.Fatalf("bob got a delivered event for his own update: %s", show(ev))
				}
				if d := num(data["delivered_seq"]); d <= lastDelivered {
					t.Fatalf("%s's log: delivered event %d after %d", name, d, lastDelivered)
				} else {
					lastDelivered = d
				}
			}
		}
		if lastRead != msgs {
			t.Fatalf("%s's last read event %d, want %d", name, lastRead, msgs)
		}
	}

	t.Run("updates that do not advance emit nothing", func(t *testing.T) {
		cursor := n.latest(t, bob)
		peer := n.latest(t, alice)
		for _, c := range []struct {
			route string
			seq   int
		}{{"read", 0}, {"read", 3}, {"read", msgs}, {"read", msgs + 100}, {"delivered", 5}, {"delivered", msgs}} {
			n.ok(t, "POST", "/v1/conversations/"+convID+"/"+c.route, bob, map[string]any{"seq": c.seq})
		}
		if got := n.latest(t, bob); got != cursor {
			t.Fatalf("bob's log grew from %d to %d on updates that did not advance", cursor, got)
		}
		if got := n.latest(t, alice); got != peer {
			t.Fatalf("alice's log grew from %d to %d on bob's updates that did not advance", peer, got)
		}
	})
}

// TestDirectCreationRace: both users create their direct conversation at the same moment,
// several times over: one conv_id, and exactly one conv_updated for each of them.
func TestDirectCreationRace(t *testing.T) {
	n := start(t)
	alice, bob := n.user(t, "alice"), n.user(t, "bob")
	const each = 4
	ids := make(chan string, 2*each)
	errs := make(chan error, 2*each)
	startLine := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 2 * each {
		tok, peer := alice, "bob"
		if i%2 == 1 {
			tok, peer = bob, "alice"
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-startLine
			r, err := n.request("POST", "/v1/conversations", tok, map[string]any{"type": "direct", "peer_id": peer})
			if err == nil && r.status != http.StatusOK {
				err = fmt.Errorf("create: %d %s", r.status, r.raw)
			}
			if err != nil {
				errs <- err
				return
			}
			m, err := decode(r.raw)
			if err != nil {
				errs <- err
				return
			}
			ids <- fmt.Sprint(m["conv_id"])
		}()
	}
	close(startLine)
	wg.Wait()
	close(errs)
	close(ids)
	for err := range errs {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for id := range ids {
		seen[id] = true
	}
	if len(seen) != 1 {
		t.Fatalf("racing creates gave conv_ids %v, want one", seen)
	}
	for name, tok := range map[string]string{"alice": alice, "bob": bob} {
		if got := types(n.events(t, tok, 0)); fmt.Sprint(got) != "[conv_updated]" {
			t.Fatalf("%s's log %v, want exactly one conv_updated", name, got)
		}
		if len(n.listed(t, tok)) != 1 {
			t.Fatalf("%s lists %d conversations", name, len(n.listed(t, tok)))
		}
	}
}

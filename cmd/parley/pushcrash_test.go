package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/internal/push/pushtest"
	"github.com/parleychat/parley/protocol"
)

// TestPushCrash kills `parley serve` with SIGKILL in the middle of a burst of messages to
// devices registered for Web Push (the fake push service decrypts every notification),
// restarts it on the same data and lets the senders resend what was not acked. Every
// device's notifications must reach its conversation's last message, and no event may be
// notified under two ids: a push repeated after the crash carries the id it had before,
// which the push service (here, the fake's count) recognises.
func TestPushCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test runs a subprocess server; skipped in -short mode")
	}
	const (
		devices = 8
		perConv = 40
	)
	f := pushtest.NewWebPush(t)
	dir := t.TempDir()
	args := []string{"--admin-secret", crashAdminSecret, "--send-rate", "0", "--request-rate", "0", "--push-allow-private"}
	p := startServe(t, dir, args...)
	ctx := context.Background()
	admin := client.NewAdmin(p.URL, crashAdminSecret, nil)
	token := func(user string) string {
		if _, _, err := admin.CreateUser(ctx, user, ""); err != nil {
			t.Fatal(err)
		}
		tok, err := admin.IssueToken(ctx, user, "phone", 0)
		if err != nil {
			t.Fatal(err)
		}
		return tok.Token
	}
	alice := token("alice")
	sc := client.New(client.Options{BaseURL: p.URL, Token: alice, UserID: "alice"})
	convs := make([]string, devices)
	subs := make(map[string]int) // the fake's subscription id -> device
	for i := range devices {
		user := fmt.Sprintf("r%d", i)
		rc := client.New(client.Options{BaseURL: p.URL, Token: token(user), UserID: user})
		sub := f.NewSubscription()
		subs[f.SubscriptionID(sub)] = i
		if _, err := rc.RegisterPush(ctx, protocol.PushRegisterRequest{Provider: "webpush", Subscription: json.RawMessage(sub)}); err != nil {
			t.Fatal(err)
		}
		c, err := sc.CreateDirect(ctx, user)
		if err != nil {
			t.Fatal(err)
		}
		convs[i] = c.ConvID
	}

	// The burst: one sender per conversation, each message until the first failure.
	var mu sync.Mutex
	acked := map[string]bool{}
	send := func(url string, conv, id string) bool {
		body, _ := json.Marshal(map[string]any{"conv_id": conv, "client_msg_id": id, "content_type": 1, "content": map[string]any{"text": id}})
		req, _ := http.NewRequest("POST", url+"/v1/messages", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+alice)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false
		}
		mu.Lock()
		acked[id] = true
		mu.Unlock()
		return true
	}
	msgID := func(conv, i int) string { return "c" + strconv.Itoa(conv) + "-" + strconv.Itoa(i) }
	var wg sync.WaitGroup
	for c := range devices {
		wg.Go(func() {
			for i := range perConv {
				if !send(p.URL, convs[c], msgID(c, i)) {
					return
				}
			}
		})
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := f.WaitCount(wctx, devices); err != nil { // mid-burst: the first pushes are out
		t.Fatal(err)
	}
	p.kill()
	wg.Wait()
	mu.Lock()
	before := len(acked)
	mu.Unlock()
	t.Logf("killed after %d of %d sends were acked and %d notifications accepted", before, devices*perConv, f.Count())

	p = startServe(t, dir, args...)
	t.Logf("restarted")
	for c := range devices {
		for i := range perConv {
			if !acked[msgID(c, i)] && !send(p.URL, convs[c], msgID(c, i)) {
				t.Fatalf("resend of %s failed", msgID(c, i))
			}
		}
	}

	// Every device is notified up to its conversation's last message.
	last := func() map[int]int64 {
		top := map[int]int64{}
		for _, m := range f.Messages() {
			seq, _ := strconv.ParseInt(m.Data["seq"], 10, 64)
			d := subs[m.SubscriptionID]
			top[d] = max(top[d], seq)
		}
		return top
	}
	t.Logf("resent")
	wctx, cancel = context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		top := last()
		done := len(top) == devices
		for _, s := range top {
			done = done && s == perConv
		}
		if done {
			break
		}
		if err := f.WaitCount(wctx, f.Count()+1); err != nil {
			t.Fatalf("notified up to %v, want %d for each of %d devices: %v", top, perConv, devices, err)
		}
	}
	// No event under two ids, no id for two events, nothing for another conversation.
	ids := map[string]string{}    // (device, cursor) -> id
	events := map[string]string{} // id -> (device, cursor)
	for _, m := range f.Messages() {
		d, ok := subs[m.SubscriptionID]
		if !ok || m.Data["conv_id"] != convs[d] {
			t.Fatalf("notification %v for subscription %s", m.Data, m.SubscriptionID)
		}
		ev := strconv.Itoa(d) + "/" + m.Data["cursor"]
		if id, seen := ids[ev]; seen && id != m.Data["push_id"] {
			t.Fatalf("event %s notified under ids %s and %s", ev, id, m.Data["push_id"])
		}
		if e, seen := events[m.Data["push_id"]]; seen && e != ev {
			t.Fatalf("id %s used for events %s and %s", m.Data["push_id"], e, ev)
		}
		ids[ev], events[m.Data["push_id"]] = m.Data["push_id"], ev
	}
	t.Logf("%d notifications for %d messages (collapsed per conversation), %d repeated after the crash with their id",
		f.Count(), devices*perConv, f.Repeats())
}

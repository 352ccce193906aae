package e2e

import (
	"fmt"
	"github.com/parleychat/parley/internal/parleytest"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/server"
)

// TestReadFanoutGroup: a group larger than --write-fanout-max switches to read fanout: its
// messages are in no member's log, and every member learns of them by the sync mark,
// pulled or long-polled, with the unread count, and reads them by history. Messages sent
// before the switch stay events; one seq runs across it.
func TestReadFanoutGroup(t *testing.T) {
	n := start(t, func(c *server.Config) { c.Chat.WriteFanoutMax = 3 })
	alice, bob := n.user(t, "alice"), n.user(t, "bob")
	n.user(t, "carol")
	n.user(t, "dave")
	g := n.group(t, alice, "small first", false, "bob", "carol")
	convID := g["conv_id"].(string)
	if g["fanout"] != "write" {
		t.Fatalf("a group of 3 with --write-fanout-max 3: fanout %v, want write", g["fanout"])
	}
	n.send(t, alice, convID, "before")
	start := n.latest(t, bob)
	grown := n.ok(t, "POST", "/v1/conversations/"+convID+"/members", alice, map[string]any{"add": []string{"dave"}})
	if grown["fanout"] != "read" || num(grown["members_count"]) != 4 {
		t.Fatalf("grown past the limit: %s, want fanout read", show(grown))
	}
	for i := range 3 {
		if ack := n.send(t, alice, convID, fmt.Sprint("after-", i)); num(ack["seq"]) != int64(i+2) {
			t.Fatalf("ack %d = %s, want seq %d", i, show(ack), i+2)
		}
	}

	sync := func(cursor, mark int64, wait int) map[string]any {
		t.Helper()
		return n.ok(t, "GET", fmt.Sprintf("/v1/sync?cursor=%d&mark=%d&wait=%d", cursor, mark, wait), bob, nil)
	}
	first := sync(start, 0, 0)
	for _, ev := range arr(t, first["events"]) {
		if ev["type"] == "message" {
			t.Errorf("a read-fanout message reached bob's log: %s", show(ev))
		}
	}
	convs := arr(t, first["conversations"])
	if len(convs) != 1 || convs[0]["conv_id"] != convID || num(convs[0]["max_seq"]) != 4 ||
		num(convs[0]["unread"]) != 4 || convs[0]["fanout"] != "read" {
		t.Fatalf("sync from mark 0: conversations %s, want the group at max_seq 4 with 4 unread", show(convs))
	}
	checkBrief(t, "changed conversation", convs[0])
	mark := num(first["mark"])
	if mark <= 0 {
		t.Fatalf("mark %d after read-fanout messages", mark)
	}
	// A new device starts from a snapshot: its mark is the same cut's, on every page.
	n.group(t, bob, "another, for a second page", false, "carol")
	snap := n.ok(t, "GET", "/v1/sync/snapshot?limit=1", bob, nil)
	if num(snap["mark"]) != mark || snap["has_more"] != true {
		t.Fatalf("snapshot: mark %v has_more %v, want mark %d and a second page", snap["mark"], snap["has_more"], mark)
	}
	n.send(t, alice, convID, "between-the-pages") // its mark is after the snapshot's
	page2 := n.ok(t, "GET", "/v1/sync/snapshot?limit=1&after="+snap["next"].(string), bob, nil)
	if num(page2["mark"]) != mark || num(page2["cursor"]) != num(snap["cursor"]) {
		t.Fatalf("second snapshot page: mark %v cursor %v, want the first page's %d and %v", page2["mark"], page2["cursor"], mark, snap["cursor"])
	}
	fromSnap := sync(num(snap["cursor"]), mark, 0)
	if convs := arr(t, fromSnap["conversations"]); len(convs) != 1 || num(convs[0]["max_seq"]) != 5 {
		t.Fatalf("sync from the snapshot's mark: %s, want the group's message sent between the pages", show(fromSnap))
	}
	mark, cursor := num(fromSnap["mark"]), num(fromSnap["cursor"])
	if again := sync(cursor, mark, 0); again["conversations"] != nil || num(again["mark"]) != mark {
		t.Fatalf("sync from the latest mark: %s, want no conversations and the same mark", show(again))
	}
	if got := seqs(n.history(t, bob, convID, 0)); fmt.Sprint(got) != "[1 2 3 4 5]" {
		t.Fatalf("history %v, want 1..5", got)
	}

	// A long-poll from the latest mark wakes for the next message, not before.
	n.ok(t, "POST", "/v1/conversations/"+convID+"/read", bob, map[string]any{"seq": 5})
	cursor = n.latest(t, bob) // the read is an event in bob's log
	done := make(chan map[string]any, 1)
	waiting := n.metric(t, "parley_longpolls_waiting")
	go func() {
		r, err := n.request("GET", fmt.Sprintf("/v1/sync?cursor=%d&mark=%d&wait=20", cursor, mark), bob, nil)
		if err != nil || r.status != http.StatusOK {
			t.Errorf("long-poll: %v %d %s", err, r.status, r.raw)
			done <- nil
			return
		}
		done <- object(t, r.raw)
	}()
	eventually(t, "the long-poll to wait", func() bool { return n.metric(t, "parley_longpolls_waiting") > waiting })
	n.send(t, alice, convID, "wake")
	select {
	case woke := <-done:
		convs := arr(t, woke["conversations"])
		if len(convs) != 1 || num(convs[0]["max_seq"]) != 6 || num(convs[0]["unread"]) != 1 || num(woke["mark"]) <= mark {
			t.Fatalf("long-poll woke with %s, want the group at max_seq 6, 1 unread, a higher mark", show(woke))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the long-poll did not wake for a read-fanout message")
	}
	n.fail(t, http.StatusConflict, "GET", fmt.Sprintf("/v1/sync?cursor=%d&mark=%d", cursor, mark+100), bob, nil)

	// Joining and leaving the read-fanout group: the joiner and the one who leaves are
	// told, the other members are not (their next brief has the new count).
	erin := n.user(t, "erin")
	bobBefore := n.latest(t, bob)
	n.ok(t, "POST", "/v1/conversations/"+convID+"/members", alice, map[string]any{"add": []string{"erin"}, "remove": []string{"carol"}})
	if got := n.latest(t, bob); got != bobBefore {
		t.Errorf("bob's log grew from %d to %d for others joining and leaving a read-fanout group", bobBefore, got)
	}
	evs := n.events(t, erin, 0)
	if len(evs) != 1 || evs[0]["type"] != "conv_updated" || obj(t, evs[0]["data"])["fanout"] != "read" {
		t.Fatalf("erin's log after joining: %s, want one conv_updated of the read-fanout group", show(evs))
	}
	erinSync := n.ok(t, "GET", "/v1/sync?cursor=1&mark=0", erin, nil)
	if convs := arr(t, erinSync["conversations"]); len(convs) != 1 || num(convs[0]["max_seq"]) != 6 || num(convs[0]["members_count"]) != 4 {
		t.Fatalf("erin's first sync: %s, want the group, 6 messages, 4 members", show(erinSync))
	}
	if b := n.brief(t, bob, convID); num(b["members_count"]) != 4 {
		t.Errorf("bob's brief after the change: %s, want 4 members", show(b))
	}
}

// TestHistoryRateLimit: history pages are limited per user across devices (429 with
// Retry-After once the burst is spent, on any of the user's devices), and another user's
// pages are not.
func TestHistoryRateLimit(t *testing.T) {
	parleytest.OneNode(t, "per-user limits are kept per node (docs/design.md, \"Several nodes\")")
	n := start(t, func(c *server.Config) { c.Gateway.HistoryRate, c.Gateway.HistoryBurst = 0.01, 3 })
	alice := n.user(t, "alice")
	bob := n.user(t, "bob")
	convID := n.direct(t, alice, "bob")["conv_id"].(string)
	laptop := n.Token(t, "alice", "laptop")
	path := "/v1/conversations/" + convID + "/messages"
	for i := range 3 {
		token := alice
		if i == 2 {
			token = laptop
		}
		n.ok(t, "GET", path, token, nil)
	}
	limited := n.call(t, "GET", path, laptop, nil)
	checkErrorBody(t, "history past the burst", limited, http.StatusTooManyRequests)
	if ra, err := strconv.Atoi(limited.header.Get("Retry-After")); err != nil || ra < 1 {
		t.Fatalf("Retry-After %q, want whole seconds >= 1", limited.header.Get("Retry-After"))
	}
	n.ok(t, "GET", path, bob, nil)
}

// TestUnreadTotal: GET /v1/unread sums the unread counts of the caller's conversations,
// write and read fanout alike, each as its brief counts it.
func TestUnreadTotal(t *testing.T) {
	n := start(t, func(c *server.Config) { c.Chat.WriteFanoutMax = 3 })
	alice, bob := n.user(t, "alice"), n.user(t, "bob")
	n.user(t, "carol")
	n.user(t, "dave")
	direct := n.direct(t, alice, "bob")["conv_id"].(string)
	small := n.group(t, alice, "small", false, "bob")["conv_id"].(string)
	large := n.group(t, alice, "large", false, "bob", "carol", "dave")
	if large["fanout"] != "read" {
		t.Fatalf("a group of 4 with --write-fanout-max 3: %s", show(large))
	}
	for i := range 3 {
		n.send(t, alice, direct, fmt.Sprint("d", i))
	}
	n.send(t, alice, small, "s0")
	n.send(t, alice, small, "s1")
	n.send(t, alice, large["conv_id"].(string), "l0")
	n.send(t, bob, small, "mine") // a member's own message is read: bob's count there ends at 0
	want := func(what string, unread, convs int64) {
		t.Helper()
		got := n.ok(t, "GET", "/v1/unread", bob, nil)
		wantKeys(t, "unread total", got, "unread", "conversations")
		if num(got["unread"]) != unread || num(got["conversations"]) != convs {
			t.Fatalf("%s: %s, want unread %d in %d conversations", what, show(got), unread, convs)
		}
	}
	want("after the sends", 4, 2)
	n.ok(t, "POST", "/v1/conversations/"+direct+"/read", bob, map[string]any{"seq": 2})
	want("after reading two in the direct conversation", 2, 2)
	if got := n.ok(t, "GET", "/v1/unread", alice, nil); num(got["unread"]) != 1 {
		t.Fatalf("alice's total %s, want 1 (bob's message in the small group)", show(got))
	}
}

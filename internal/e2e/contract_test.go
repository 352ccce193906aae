package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/server"
)

// TestAdminRoutes covers PROTOCOL section 3: the operator routes, their statuses (201 for a
// new user, 200 for an existing one) and their exact bodies.
func TestAdminRoutes(t *testing.T) {
	n := start(t)
	admin := n.AdminSecret

	t.Run("create user is 201 then 200", func(t *testing.T) {
		u := n.expect(t, http.StatusCreated, "POST", "/v1/admin/users", admin, map[string]any{"user_id": "alice", "name": "Alice"})
		wantKeys(t, "User", u, "user_id", "name")
		wantFields(t, "User", u, map[string]any{"user_id": "alice", "name": "Alice"})
		again := n.expect(t, http.StatusOK, "POST", "/v1/admin/users", admin, map[string]any{"user_id": "alice", "name": "Alice"})
		if show(again) != show(u) {
			t.Fatalf("existing user answered %s, want the same body %s", show(again), show(u))
		}
	})
	t.Run("name is optional", func(t *testing.T) {
		u := n.expect(t, http.StatusCreated, "POST", "/v1/admin/users", admin, map[string]any{"user_id": "bob"})
		wantKeys(t, "User", u, "user_id", "name")
	})
	t.Run("token", func(t *testing.T) {
		before := time.Now()
		tok := n.ok(t, "POST", "/v1/admin/tokens", admin, map[string]any{"user_id": "alice", "device_id": "phone"})
		wantKeys(t, "Token", tok, "token", "expires_at")
		want := before.Add(30 * 24 * time.Hour).UnixMilli()
		if exp := num(tok["expires_at"]); exp < want-60_000 || exp > want+60_000 {
			t.Fatalf("default expires_at %d, want about now + 30 days (%d)", exp, want)
		}
		short := n.ok(t, "POST", "/v1/admin/tokens", admin, map[string]any{"user_id": "alice", "device_id": "phone", "ttl_seconds": 60})
		if exp := num(short["expires_at"]); exp < before.Add(50*time.Second).UnixMilli() || exp > time.Now().Add(70*time.Second).UnixMilli() {
			t.Fatalf("ttl_seconds 60 gave expires_at %d", exp)
		}
		n.ok(t, "GET", "/v1/conversations", tok["token"].(string), nil)
	})
	t.Run("token for unknown user is 404", func(t *testing.T) {
		n.fail(t, http.StatusNotFound, "POST", "/v1/admin/tokens", admin, map[string]any{"user_id": "nobody", "device_id": "phone"})
	})
	t.Run("revoke", func(t *testing.T) {
		n.ok(t, "POST", "/v1/admin/users/bob/revoke", admin, nil)
		n.fail(t, http.StatusNotFound, "POST", "/v1/admin/users/nobody/revoke", admin, nil)
	})
	t.Run("healthz and metrics", func(t *testing.T) {
		if r := n.call(t, "GET", "/healthz", "", nil); r.status != http.StatusOK {
			t.Fatalf("healthz %d", r.status)
		}
		if r := n.call(t, "GET", "/metrics", "", nil); r.status != http.StatusOK || !strings.Contains(string(r.raw), "# TYPE") {
			t.Fatalf("metrics %d %.200s", r.status, r.raw)
		}
	})
}

// TestContractShapes covers the client routes of PROTOCOL sections 5-8: each answers 200
// with exactly the fields the protocol names.
func TestContractShapes(t *testing.T) {
	clk := &clock{}
	n := start(t, withClock(clk))
	alice, bob, carol := n.user(t, "alice"), n.user(t, "bob"), n.user(t, "carol")
	d := n.direct(t, alice, "bob")
	dID := d["conv_id"].(string)
	g := n.group(t, alice, "plain", false, "bob", "carol")
	gID := g["conv_id"].(string)
	rd := n.group(t, alice, "detail", true, "bob", "carol")
	rdID := rd["conv_id"].(string)

	t.Run("ConversationBrief direct", func(t *testing.T) {
		checkBrief(t, "direct brief", d)
		wantFields(t, "direct brief", d, map[string]any{
			"type": "direct", "fanout": "write", "members_count": 2, "max_seq": 0, "read_seq": 0,
			"delivered_seq": 0, "cleared_seq": 0, "unread": 0, "last_message": nil,
			"peer_read_seq": 0, "peer_delivered_seq": 0,
		})
		if len(dID) == 0 || len(dID) > 128 {
			t.Fatalf("conv_id %q", dID)
		}
	})
	t.Run("ConversationBrief group", func(t *testing.T) {
		checkBrief(t, "group brief", g)
		wantFields(t, "group brief", g, map[string]any{
			"type": "group", "name": "plain", "owner_id": "alice", "fanout": "write", "members_count": 3,
			"max_seq": 0, "unread": 0, "last_message": nil,
		})
		checkBrief(t, "bob's group brief", n.brief(t, bob, gID))
	})

	var ack map[string]any
	t.Run("MessageAck", func(t *testing.T) {
		clk.advance(time.Second) // so that this conversation is unambiguously the latest active
		before := clk.now().UnixMilli()
		ack = n.ok(t, "POST", "/v1/messages", alice, map[string]any{
			"conv_id": dID, "client_msg_id": "c-1", "content_type": 1,
			"content": map[string]any{"text": "hello", "n": []any{1.0, "two"}}, "extra": map[string]string{"k": "v"},
		})
		wantKeys(t, "MessageAck", ack, ackKeys...)
		wantFields(t, "MessageAck", ack, map[string]any{"code": 0, "conv_id": dID, "client_msg_id": "c-1", "seq": 1, "duplicate": false})
		if ts := num(ack["created_at"]); ts < before-1000 || ts > clk.now().UnixMilli()+1000 {
			t.Fatalf("created_at %d is not now in Unix ms", ts)
		}
		if id, _ := ack["msg_id"].(string); id == "" {
			t.Fatalf("msg_id %v", ack["msg_id"])
		}
	})
	t.Run("Message", func(t *testing.T) {
		ms := n.history(t, bob, dID, 0)
		if len(ms) != 1 {
			t.Fatalf("history %s", show(ms))
		}
		wantKeys(t, "Message", ms[0], messageKeys...)
		wantFields(t, "Message", ms[0], map[string]any{
			"conv_id": dID, "seq": 1, "msg_id": ack["msg_id"], "client_msg_id": "c-1", "sender_id": "alice",
			"content_type": 1, "content": map[string]any{"n": []any{1.0, "two"}, "text": "hello"},
			"extra": map[string]any{"k": "v"}, "created_at": ack["created_at"], "recalled": false,
		})
		b := n.brief(t, bob, dID)
		checkBrief(t, "brief with a message", b)
		if show(b["last_message"]) != show(ms[0]) {
			t.Fatalf("last_message %s, want %s", show(b["last_message"]), show(ms[0]))
		}
		wantFields(t, "bob's brief", b, map[string]any{"max_seq": 1, "unread": 1, "read_seq": 0, "peer_read_seq": 1, "peer_delivered_seq": 1})
	})
	t.Run("list most recent first", func(t *testing.T) {
		list := n.ok(t, "GET", "/v1/conversations", alice, nil)
		wantKeys(t, "conversation list", list, "conversations", "has_more", "next")
		convs := arr(t, list["conversations"])
		if len(convs) != 3 || convs[0]["conv_id"] != dID {
			t.Fatalf("list %s, want 3 conversations with %s (the latest message) first", show(convs), dID)
		}
		for _, b := range convs {
			checkBrief(t, "listed brief", b)
		}
	})
	t.Run("history paging", func(t *testing.T) {
		for i := 1; i <= 5; i++ {
			n.send(t, alice, gID, fmt.Sprintf("g-%d", i))
		}
		cases := []struct {
			query   string
			want    []int64
			hasMore bool
		}{
			{"after_seq=0&limit=2", []int64{1, 2}, true},
			{"after_seq=4", []int64{5}, false},
			{"after_seq=5", []int64{}, false},
			{"before_seq=5&limit=2", []int64{3, 4}, true},
			{"before_seq=3&limit=5", []int64{1, 2}, false},
			{"limit=100000", []int64{1, 2, 3, 4, 5}, false},
		}
		for _, c := range cases {
			t.Run(c.query, func(t *testing.T) {
				page := n.ok(t, "GET", "/v1/conversations/"+gID+"/messages?"+c.query, bob, nil)
				wantKeys(t, "messages page", page, "messages", "has_more")
				ms := arr(t, page["messages"])
				if got := seqs(ms); fmt.Sprint(got) != fmt.Sprint(c.want) || page["has_more"] != c.hasMore {
					t.Fatalf("seqs %v has_more %v, want %v %v", got, page["has_more"], c.want, c.hasMore)
				}
			})
		}
	})
	t.Run("read and delivered", func(t *testing.T) {
		r := n.ok(t, "POST", "/v1/conversations/"+gID+"/delivered", bob, map[string]any{"seq": 2})
		wantKeys(t, "delivered answer", r, "delivered_seq")
		wantFields(t, "delivered answer", r, map[string]any{"delivered_seq": 2})
		r = n.ok(t, "POST", "/v1/conversations/"+gID+"/read", bob, map[string]any{"seq": 3})
		wantKeys(t, "read answer", r, "read_seq")
		wantFields(t, "read answer", r, map[string]any{"read_seq": 3})
		// A read raises the delivered position with it; stale updates return the current one.
		cases := []struct {
			name, route string
			seq         int
			field       string
			want        int
		}{
			{"stale delivered", "delivered", 1, "delivered_seq", 3},
			{"stale read", "read", 2, "read_seq", 3},
			{"zero changes nothing", "read", 0, "read_seq", 3},
			{"beyond max_seq is clamped", "read", 99, "read_seq", 5},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				r := n.ok(t, "POST", "/v1/conversations/"+gID+"/"+c.route, bob, map[string]any{"seq": c.seq})
				wantKeys(t, c.route+" answer", r, c.field)
				wantFields(t, c.route+" answer", r, map[string]any{c.field: c.want})
			})
		}
		wantFields(t, "bob's group brief", n.brief(t, bob, gID), map[string]any{"read_seq": 5, "delivered_seq": 5, "unread": 0})
	})
	t.Run("receipts", func(t *testing.T) {
		n.send(t, alice, rdID, "rd-1")
		cases := []struct {
			name, convID string
			keys         []string
			want         map[string]any
		}{
			{"direct lists readers", dID, []string{"seq", "member_count", "read_count", "delivered_count", "readers"},
				map[string]any{"seq": 1, "member_count": 1, "read_count": 0, "delivered_count": 0, "readers": []any{}}},
			{"group without read_detail has no readers", gID, []string{"seq", "member_count", "read_count", "delivered_count"},
				map[string]any{"seq": 1, "member_count": 2, "read_count": 1, "delivered_count": 1}},
			{"read_detail group lists readers", rdID, []string{"seq", "member_count", "read_count", "delivered_count", "readers"},
				map[string]any{"seq": 1, "member_count": 2, "read_count": 0, "delivered_count": 0, "readers": []any{}}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				r := n.ok(t, "GET", "/v1/conversations/"+c.convID+"/receipts?seq=1", alice, nil)
				wantKeys(t, "receipts", r, c.keys...)
				wantFields(t, "receipts", r, c.want)
			})
		}
		n.ok(t, "POST", "/v1/conversations/"+dID+"/read", bob, map[string]any{"seq": 1})
		wantFields(t, "direct receipts after read", n.ok(t, "GET", "/v1/conversations/"+dID+"/receipts?seq=1", alice, nil),
			map[string]any{"read_count": 1, "delivered_count": 1, "readers": []any{"bob"}})
		for _, seq := range []string{"0", "2", "-1"} {
			n.fail(t, http.StatusNotFound, "GET", "/v1/conversations/"+dID+"/receipts?seq="+seq, alice, nil)
		}
	})
	t.Run("SyncResponse and SyncEvent", func(t *testing.T) {
		resp := n.ok(t, "GET", "/v1/sync?cursor=0", bob, nil)
		wantKeys(t, "SyncResponse", resp, "cursor", "events", "has_more", "mark")
		evs := arr(t, resp["events"])
		if len(evs) == 0 || resp["has_more"] != false || num(resp["cursor"]) != num(evs[len(evs)-1]["cursor"]) {
			t.Fatalf("sync %s", show(resp))
		}
		for i, ev := range evs {
			wantKeys(t, "SyncEvent", ev, eventKeys...)
			if num(ev["cursor"]) != int64(i+1) {
				t.Fatalf("event %d has cursor %v: cursors must be 1, 2, 3 ...", i, ev["cursor"])
			}
			checkEventData(t, ev)
		}
		last := num(resp["cursor"])
		one := n.ok(t, "GET", "/v1/sync?cursor=0&limit=1", bob, nil)
		if len(arr(t, one["events"])) != 1 || one["has_more"] != true || num(one["cursor"]) != 1 {
			t.Fatalf("sync limit=1: %s", show(one))
		}
		none := n.ok(t, "GET", fmt.Sprintf("/v1/sync?cursor=%d", last), bob, nil)
		if len(arr(t, none["events"])) != 0 || none["has_more"] != false || num(none["cursor"]) != last {
			t.Fatalf("sync at the latest cursor: %s, want no events and cursor %d", show(none), last)
		}
		n.fail(t, http.StatusConflict, "GET", fmt.Sprintf("/v1/sync?cursor=%d", last+1), bob, nil)
	})
	t.Run("SyncSnapshot", func(t *testing.T) {
		snap := n.ok(t, "GET", "/v1/sync/snapshot", bob, nil)
		wantKeys(t, "SyncSnapshot", snap, "cursor", "mark", "conversations", "messages", "read_positions", "has_more", "next")
		if got, want := num(snap["cursor"]), n.latest(t, bob); got != want {
			t.Fatalf("snapshot cursor %d, latest %d", got, want)
		}
		convs := arr(t, snap["conversations"])
		if len(convs) != 3 {
			t.Fatalf("snapshot conversations %s", show(convs))
		}
		for _, b := range convs {
			checkBrief(t, "snapshot brief", b)
		}
		msgs := obj(t, snap["messages"])
		if got := seqs(arr(t, msgs[gID])); fmt.Sprint(got) != "[1 2 3 4 5]" {
			t.Fatalf("snapshot messages of the group: seqs %v, want ascending 1..5", got)
		}
		for _, m := range arr(t, msgs[dID]) {
			wantKeys(t, "snapshot Message", m, messageKeys...)
		}
		pos := obj(t, snap["read_positions"])
		wantFields(t, "direct read positions", obj(t, pos[dID]), map[string]any{"alice": 1, "bob": 1})
		if _, ok := pos[gID]; ok {
			t.Fatalf("read positions of a group without read_detail: %s", show(pos[gID]))
		}
		wantKeys(t, "read_detail group read positions", obj(t, pos[rdID]), "alice", "bob", "carol")

		recent := obj(t, n.ok(t, "GET", "/v1/sync/snapshot?recent=2", bob, nil)["messages"])
		if got := seqs(arr(t, recent[gID])); fmt.Sprint(got) != "[4 5]" {
			t.Fatalf("recent=2: seqs %v, want the latest two ascending", got)
		}
		for id, ms := range obj(t, n.ok(t, "GET", "/v1/sync/snapshot?recent=0", bob, nil)["messages"]) {
			if ms != nil && len(arr(t, ms)) != 0 {
				t.Fatalf("recent=0 returned messages for %s", id)
			}
		}
	})
	t.Run("DELETE and recall answer 200", func(t *testing.T) {
		n.ok(t, "POST", "/v1/messages/recall", alice, map[string]any{"conv_id": gID, "seq": 5})
		n.ok(t, "DELETE", "/v1/conversations/"+gID, carol, nil)
	})
}

// checkEventData checks the data of one SyncEvent against the table of PROTOCOL section 8.
func checkEventData(t testing.TB, ev map[string]any) {
	t.Helper()
	what := fmt.Sprintf("%v event data", ev["type"])
	switch ev["type"] {
	case "message":
		wantKeys(t, what, obj(t, ev["data"]), messageKeys...)
	case "conv_updated":
		checkBrief(t, what, obj(t, ev["data"]))
	case "read":
		wantKeys(t, what, obj(t, ev["data"]), "user_id", "read_seq")
	case "delivered":
		wantKeys(t, what, obj(t, ev["data"]), "user_id", "delivered_seq")
	case "recall":
		wantKeys(t, what, obj(t, ev["data"]), "seq", "msg_id", "sender_id")
	case "conv_deleted":
		wantKeys(t, what, obj(t, ev["data"]), "cleared_seq")
	default:
		t.Fatalf("unknown event type in %s", show(ev))
	}
	if d, _ := ev["data"].(map[string]any); d != nil && d["conv_id"] != nil && d["conv_id"] != ev["conv_id"] {
		t.Fatalf("event conv_id %v but data conv_id %v", ev["conv_id"], d["conv_id"])
	}
}

// TestPageLimits checks the defaults and clamps of PROTOCOL sections 6 and 8: history 50 /
// 200, snapshot recent 20 / 100, sync 100.
func TestPageLimits(t *testing.T) {
	n := start(t, func(c *server.Config) { c.Gateway.SendRate, c.Gateway.RequestRate = 0, 0 })
	alice := n.user(t, "alice")
	n.user(t, "bob")
	convID := n.direct(t, alice, "bob")["conv_id"].(string)
	ws := n.dial(t, n.Token(t, "alice", "sender"), -1)
	const total = 205
	for i := range total {
		if r := ws.do("send", textMessage(convID, fmt.Sprintf("m%d", i))); num(r["code"]) != 0 {
			t.Fatalf("send %d: %s", i, show(r))
		}
	}
	count := func(path, field string) (int, any) {
		t.Helper()
		m := n.ok(t, "GET", path, alice, nil)
		return len(arr(t, m[field])), m["has_more"]
	}
	cases := []struct {
		name, path, field string
		want              int
		hasMore           any
	}{
		{"history default", "/v1/conversations/" + convID + "/messages", "messages", 50, true},
		{"history clamped", "/v1/conversations/" + convID + "/messages?limit=1000", "messages", 200, true},
		{"history before clamped", "/v1/conversations/" + convID + fmt.Sprintf("/messages?before_seq=%d&limit=1000", total+1), "messages", 200, true},
		{"sync default", "/v1/sync?cursor=0", "events", 100, true},
		{"sync larger limit", "/v1/sync?cursor=0&limit=5000", "events", total + 1, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got, more := count(c.path, c.field); got != c.want || more != c.hasMore {
				t.Fatalf("%d items, has_more %v; want %d, %v", got, more, c.want, c.hasMore)
			}
		})
	}
	for _, c := range []struct {
		query string
		want  int
	}{{"", 20}, {"?recent=1000", 100}, {"?recent=3", 3}} {
		t.Run("snapshot"+c.query, func(t *testing.T) {
			ms := arr(t, obj(t, n.ok(t, "GET", "/v1/sync/snapshot"+c.query, alice, nil)["messages"])[convID])
			if len(ms) != c.want || num(ms[len(ms)-1]["seq"]) != total {
				t.Fatalf("snapshot%s: %d messages ending at %v, want the latest %d", c.query, len(ms), ms[len(ms)-1]["seq"], c.want)
			}
		})
	}
}

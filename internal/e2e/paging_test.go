package e2e

import (
	"cmp"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/parleychat/parley/internal/server"
	"github.com/parleychat/parley/protocol"
)

// unsolicitedGroups is how many groups the attacker puts the victim in: ten times the
// default page, enough that an unpaged list or snapshot would be many pages long.
const unsolicitedGroups = 1050

// pageKeys are the keys every page of a list carries besides its items.
var pageKeys = []string{"has_more", "next"}

// fastSetup lets the attacker create the groups quickly: no per-device request limit, no
// creation limit (TestAttackGroupCreation tests that one), and fewer fsyncs on the embedded
// engines (PostgreSQL refuses Relaxed). None of them changes what is paged.
func fastSetup(cfg *server.Config) {
	cfg.Relaxed = cfg.Engine != "postgres"
	cfg.Gateway.RequestRate = 0
	cfg.Gateway.ConvCreateEvery = 0
}

// addToGroups has the attacker put victim in count groups, from 8 connections at once, and
// returns their conv_ids.
func addToGroups(t *testing.T, n *node, attacker, victim string, count int) []string {
	t.Helper()
	ids := make([]string, count)
	errs := make(chan error, count)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < count; i += 8 {
				body := map[string]any{"type": "group", "name": fmt.Sprintf("spam %d", i), "members": []string{victim}}
				r, err := n.request("POST", "/v1/conversations", attacker, body)
				if err == nil && r.status != 200 {
					err = fmt.Errorf("create group = %d %s", r.status, r.raw)
				}
				if err != nil {
					errs <- err
					return
				}
				ids[i] = object(t, r.raw)["conv_id"].(string)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return ids
}

// listPage is one page of a paged list call.
type listPage struct {
	body  map[string]any
	bytes int
}

// pages fetches path (which has a query already) page after page with limit, following
// "next" until has_more is false, and checks the paging fields of each page.
func (n *node) pages(t *testing.T, token, path string, limit int) []listPage {
	t.Helper()
	return n.pagesAfter(t, token, path, limit, "")
}

// pagesAfter is pages starting after the page whose "next" is after.
func (n *node) pagesAfter(t *testing.T, token, path string, limit int, after string) []listPage {
	t.Helper()
	var out []listPage
	for {
		p := fmt.Sprintf("%s&limit=%d", path, limit)
		if after != "" {
			p += "&after=" + url.QueryEscape(after)
		}
		r := n.call(t, "GET", p, token, nil)
		if r.status != 200 {
			t.Fatalf("GET %s = %d %s", p, r.status, r.raw)
		}
		body := object(t, r.raw)
		out = append(out, listPage{body: body, bytes: len(r.raw)})
		more, next := body["has_more"], body["next"]
		if more != (next != "") {
			t.Fatalf("GET %s: has_more %v with next %q", p, more, next)
		}
		if more != true {
			return out
		}
		after = next.(string)
	}
}

// checkActivityOrder fails unless list is in list order: updated_at descending, then conv_id.
func checkActivityOrder(t *testing.T, list []map[string]any) {
	t.Helper()
	for i := 1; i < len(list); i++ {
		a, b := list[i-1], list[i]
		c := cmp.Compare(num(b["updated_at"]), num(a["updated_at"]))
		if c == 0 {
			c = cmp.Compare(a["conv_id"].(string), b["conv_id"].(string))
		}
		if c >= 0 {
			t.Fatalf("list out of order at %d: %v/%v then %v/%v", i, a["updated_at"], a["conv_id"], b["updated_at"], b["conv_id"])
		}
	}
}

// checkExactlyOnce fails unless list names every id of want exactly once, and nothing else.
func checkExactlyOnce(t *testing.T, what string, list []map[string]any, want []string) {
	t.Helper()
	seen := map[string]int{}
	for _, b := range list {
		seen[b["conv_id"].(string)]++
	}
	for _, id := range want {
		if seen[id] != 1 {
			t.Fatalf("%s: %s appears %d times", what, id, seen[id])
		}
	}
	if len(list) != len(want) {
		t.Fatalf("%s: %d conversations, want %d", what, len(list), len(want))
	}
}

// TestAttackUnsolicitedGroups performs issue 7's attack: one user puts another in a
// thousand groups. The victim's conversation list and snapshot then come in bounded pages
// that, followed to the end, name every conversation exactly once, in order; a snapshot
// assembled from its pages converges with later events; other users are unaffected while
// the victim's device fetches them.
func TestAttackUnsolicitedGroups(t *testing.T) {
	n := start(t, fastSetup)
	attacker, victim := n.user(t, "mallory"), n.user(t, "victim")
	ids := addToGroups(t, n, attacker, "victim", unsolicitedGroups)

	t.Run("list", func(t *testing.T) { checkListPages(t, n, victim, ids) })
	t.Run("snapshot", func(t *testing.T) { checkSnapshotPages(t, n, attacker, victim, ids) })
	t.Run("bystander", func(t *testing.T) {
		by := newBystander(t, n, "by")
		base := by.baseline(t)
		stop := fetchUntilStopped(t, n, victim, "/v1/conversations", "/v1/sync/snapshot")
		by.unaffected(t, "the victim's device fetching its list and snapshot", base)
		stop()
	})
	t.Run("bad tokens", func(t *testing.T) {
		list := n.ok(t, "GET", "/v1/conversations?limit=1", victim, nil)
		next := url.QueryEscape(list["next"].(string))
		n.fail(t, 400, "GET", "/v1/sync/snapshot?after="+next, victim, nil) // another call's token
		n.fail(t, 400, "GET", "/v1/conversations?after=bm90IGEgdG9rZW4", victim, nil)
		n.fail(t, 400, "GET", "/v1/conversations?after=%25%25", victim, nil)
		n.fail(t, 400, "GET", "/v1/conversations?limit=-1", victim, nil)
		n.fail(t, 400, "GET", "/v1/sync/snapshot?limit=x", victim, nil)
	})
}

// checkListPages checks the unpaged list (the first page) and pages through the list.
func checkListPages(t *testing.T, n *node, victim string, ids []string) {
	first := n.ok(t, "GET", "/v1/conversations", victim, nil)
	wantKeys(t, "list", first, append([]string{"conversations"}, pageKeys...)...)
	if got := len(arr(t, first["conversations"])); got != protocol.DefaultListLimit || first["has_more"] != true {
		t.Fatalf("unpaged list: %d conversations, has_more %v; want the first page of %d", got, first["has_more"], protocol.DefaultListLimit)
	}
	const limit = 150
	var all []map[string]any
	for _, p := range n.pages(t, victim, "/v1/conversations?", limit) {
		list := arr(t, p.body["conversations"])
		if len(list) > limit || p.bytes > limit*1024 {
			t.Fatalf("page of %d conversations, %d bytes: want at most %d and 1 KiB each", len(list), p.bytes, limit)
		}
		all = append(all, list...)
	}
	checkExactlyOnce(t, "paged list", all, ids)
	checkActivityOrder(t, all)
}

// checkSnapshotPages pages through the victim's snapshot while the attacker keeps acting,
// assembles it as docs/protocol.md 8.2 says, and checks that it converges with the list.
func checkSnapshotPages(t *testing.T, n *node, attacker, victim string, ids []string) {
	// Twenty conversations with a message near the content limit: the first pages end by
	// bytes, not by count.
	big := map[string]any{"text": strings.Repeat("x", protocol.MaxContentBytes-100)}
	for i, id := range ids[:20] {
		n.ok(t, "POST", "/v1/messages", attacker, map[string]any{"conv_id": id, "client_msg_id": fmt.Sprintf("big-%d", i), "content_type": 1, "content": big})
	}
	const limit, pageBound = 100, 3 << 20 // one conversation may pass the 1 MiB budget
	path := "/v1/sync/snapshot?recent=2"
	first := n.ok(t, "GET", path+fmt.Sprintf("&limit=%d", limit), victim, nil)
	wantKeys(t, "snapshot", first, append([]string{"cursor", "mark", "conversations", "messages", "read_positions"}, pageKeys...)...)
	cursor := num(first["cursor"])

	// While the device pages: a conversation of a later page moves to the top (skipped by
	// the later pages), and a new group appears (after the first page's cursor).
	last := ids[len(ids)-1]
	n.send(t, attacker, last, "moved")
	fresh := n.group(t, attacker, "fresh", false, "victim")["conv_id"].(string)

	briefs := map[string]map[string]any{}
	var order []map[string]any
	for i, p := range append([]listPage{{body: first}}, n.pagesAfter(t, victim, path, limit, first["next"].(string))...) {
		list := arr(t, p.body["conversations"])
		if num(p.body["cursor"]) != cursor || len(list) > limit || p.bytes > pageBound {
			t.Fatalf("snapshot page %d: cursor %v (first %d), %d conversations, %d bytes", i, p.body["cursor"], cursor, len(list), p.bytes)
		}
		if i == 0 && len(list) >= limit {
			t.Fatalf("first snapshot page holds %d conversations of 64 KiB messages: not bounded by bytes", len(list))
		}
		msgs := obj(t, p.body["messages"])
		for _, b := range list {
			id := b["conv_id"].(string)
			if briefs[id] != nil {
				t.Fatalf("%s on two snapshot pages", id)
			}
			if _, ok := msgs[id]; !ok {
				t.Fatalf("page %d lists %s without its messages", i, id)
			}
			briefs[id] = b
		}
		if len(msgs) != len(list) {
			t.Fatalf("page %d: messages for %d conversations, %d listed", i, len(msgs), len(list))
		}
		order = append(order, list...)
	}
	checkActivityOrder(t, order)
	if briefs[last] != nil || briefs[fresh] != nil {
		t.Fatalf("snapshot pages hold conversations that changed after the first page")
	}
	if len(briefs) != len(ids)-1 {
		t.Fatalf("snapshot pages hold %d conversations, want %d", len(briefs), len(ids)-1)
	}
	applySince(t, n, victim, cursor, briefs)
	final := map[string]bool{}
	for _, p := range n.pages(t, victim, "/v1/conversations?", protocol.MaxListLimit) {
		for _, b := range arr(t, p.body["conversations"]) {
			final[b["conv_id"].(string)] = true
		}
	}
	if len(final) != len(briefs) {
		t.Fatalf("assembled snapshot plus events: %d conversations, the list has %d", len(briefs), len(final))
	}
	for id := range final {
		if briefs[id] == nil {
			t.Fatalf("assembled snapshot plus events misses %s", id)
		}
	}
}

// applySince applies the caller's events after cursor to briefs as a client does: a
// conv_updated carries the full brief; a message of a conversation it does not hold makes
// it fetch that conversation.
func applySince(t *testing.T, n *node, token string, cursor int64, briefs map[string]map[string]any) {
	t.Helper()
	for _, ev := range n.events(t, token, cursor) {
		id := ev["conv_id"].(string)
		switch ev["type"] {
		case protocol.EventConvUpdated:
			briefs[id] = obj(t, ev["data"])
		case protocol.EventMessage:
			if briefs[id] == nil {
				briefs[id] = n.brief(t, token, id)
			}
		}
	}
}

// fetchUntilStopped has a device of the token's user GET paths over and over, until the
// returned function is called; any answer but 200 fails the test.
func fetchUntilStopped(t *testing.T, n *node, token string, paths ...string) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			r, err := n.request("GET", paths[i%len(paths)], token, nil)
			if err == nil && r.status != 200 {
				err = fmt.Errorf("GET %s = %d %s", paths[i%len(paths)], r.status, r.raw)
			}
			if err != nil {
				errs <- err
				return
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
}

// namedUser creates a user with a name and returns a token for device "d1".
func namedUser(t *testing.T, n *node, id, name string) string {
	t.Helper()
	n.expect(t, 201, "POST", "/v1/admin/users", n.AdminSecret, map[string]any{"user_id": id, "name": name})
	return n.Token(t, id, "d1")
}

// TestMembersListing pages through a group's members: order of standing, names, roles;
// members only.
func TestMembersListing(t *testing.T) {
	n := start(t)
	owner := namedUser(t, n, "owner", "The Owner")
	others := []string{"m1", "m2", "m3", "m4", "m5", "m6", "m7"}
	for _, u := range others {
		namedUser(t, n, u, "Name of "+u)
	}
	outsider := n.user(t, "outsider")
	conv := n.group(t, owner, "club", false, others[:4]...)["conv_id"].(string)
	n.ok(t, "POST", "/v1/conversations/"+conv+"/members", owner, map[string]any{"add": others[4:]})

	var got []map[string]any
	for _, p := range n.pages(t, owner, "/v1/conversations/"+conv+"/members?", 3) {
		wantKeys(t, "members page", p.body, append([]string{"members"}, pageKeys...)...)
		ms := arr(t, p.body["members"])
		if len(ms) > 3 {
			t.Fatalf("members page of %d, limit 3", len(ms))
		}
		got = append(got, ms...)
	}
	want := append([]string{"owner"}, others...)
	if len(got) != len(want) {
		t.Fatalf("listed %d members, want %d: %s", len(got), len(want), show(got))
	}
	for i, m := range got {
		wantKeys(t, "member", m, "user_id", "name", "joined_at", "role")
		role, name := "member", "Name of "+want[i]
		if i == 0 {
			role, name = "owner", "The Owner"
		}
		wantFields(t, "member", m, map[string]any{"user_id": want[i], "name": name, "role": role})
		if i > 0 && num(m["joined_at"]) < num(got[i-1]["joined_at"]) {
			t.Fatalf("members not in order of standing: %s", show(got))
		}
	}

	n.fail(t, 404, "GET", "/v1/conversations/"+conv+"/members", outsider, nil)
	n.fail(t, 404, "GET", "/v1/conversations/g_aaaaaaaaaaaaaaaaaaaaaaaaaa/members", owner, nil)
	n.fail(t, 400, "GET", "/v1/conversations/no.such!id/members", owner, nil)
	n.fail(t, 400, "GET", "/v1/conversations/"+conv+"/members?after=m1", owner, nil)
	n.fail(t, 401, "GET", "/v1/conversations/"+conv+"/members", "", nil)

	direct := n.direct(t, owner, "m1")["conv_id"].(string)
	ms := arr(t, n.ok(t, "GET", "/v1/conversations/"+direct+"/members", owner, nil)["members"])
	if len(ms) != 2 || ms[0]["role"] != "member" || ms[1]["role"] != "member" {
		t.Fatalf("direct conversation members: %s", show(ms))
	}
}

// TestMeAndUserLookup checks GET /v1/me and GET /v1/users/{user_id}.
func TestMeAndUserLookup(t *testing.T) {
	n := start(t)
	alice := namedUser(t, n, "alice", "Alice Liddell")
	namedUser(t, n, "bob", "Bob")
	phone := n.Token(t, "alice", "phone")

	me := n.ok(t, "GET", "/v1/me", phone, nil)
	wantKeys(t, "me", me, "user_id", "device_id", "name", "presence")
	wantFields(t, "me", me, map[string]any{"user_id": "alice", "device_id": "phone", "name": "Alice Liddell", "presence": "visible"})
	for _, setting := range []string{"hidden", "visible"} {
		if got := n.ok(t, "PATCH", "/v1/me", phone, map[string]any{"presence": setting}); got["presence"] != setting {
			t.Fatalf("PATCH /v1/me %s: %s", setting, show(got))
		}
		if got := n.ok(t, "GET", "/v1/me", phone, nil); got["presence"] != setting {
			t.Fatalf("GET /v1/me after %s: %s", setting, show(got))
		}
	}

	u := n.ok(t, "GET", "/v1/users/bob", alice, nil)
	wantKeys(t, "user", u, "user_id", "name")
	wantFields(t, "user", u, map[string]any{"user_id": "bob", "name": "Bob"})

	n.fail(t, 404, "GET", "/v1/users/zoe", alice, nil)
	n.fail(t, 400, "GET", "/v1/users/no!such", alice, nil)
	n.fail(t, 401, "GET", "/v1/users/bob", "", nil)
	n.fail(t, 401, "GET", "/v1/me", "", nil)
}

// TestLeaveGroupAddedTo: a user put in a group by someone else leaves it by removing
// themselves, the way docs/protocol.md 5.5 tells.
func TestLeaveGroupAddedTo(t *testing.T) {
	n := start(t)
	mallory, victim := n.user(t, "mallory"), n.user(t, "victim")
	carol := n.user(t, "carol")
	conv := n.group(t, mallory, "unwanted", false, "victim", "carol")["conv_id"].(string)
	cursor := n.latest(t, victim)

	b := n.ok(t, "POST", "/v1/conversations/"+conv+"/members", victim, map[string]any{"remove": []string{"victim"}})
	wantFields(t, "brief after leaving", b, map[string]any{"members_count": float64(2), "owner_id": "mallory"})
	n.fail(t, 404, "GET", "/v1/conversations/"+conv, victim, nil)
	n.fail(t, 404, "GET", "/v1/conversations/"+conv+"/members", victim, nil)
	if find(n.listed(t, victim), conv) != nil {
		t.Fatalf("the group is still in the list of the user who left")
	}
	if evs := n.events(t, victim, cursor); len(evs) != 1 || evs[0]["type"] != protocol.EventConvUpdated {
		t.Fatalf("events after leaving: %s", show(evs))
	}
	ms := arr(t, n.ok(t, "GET", "/v1/conversations/"+conv+"/members", mallory, nil)["members"])
	if len(ms) != 2 || ms[0]["user_id"] != "mallory" || ms[1]["user_id"] != "carol" {
		t.Fatalf("members after the victim left: %s", show(ms))
	}
	// Removing someone else stays the owner's right.
	n.fail(t, 403, "POST", "/v1/conversations/"+conv+"/members", carol, map[string]any{"remove": []string{"mallory"}})
}

package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
)

// lastEvent returns the last event of the user's log.
func lastEvent(t *testing.T, n *node, token string) map[string]any {
	t.Helper()
	evs := n.events(t, token, 0)
	if len(evs) == 0 {
		t.Fatal("empty event log")
	}
	return evs[len(evs)-1]
}

// TestGroups covers PROTOCOL section 5 for groups: creation, owner-only changes, a member
// added later (visible_from), leaving, removal, owner transfer, and receipts (section 7).
func TestGroups(t *testing.T) {
	n := start(t)
	tok := map[string]string{}
	for _, u := range []string{"alice", "bob", "carol", "dave", "erin", "frank"} {
		tok[u] = n.user(t, u)
	}
	// members are the users to whom the conversation answers (a group without read_detail
	// lists nobody's read position in snapshots).
	members := func(convID string) []string {
		t.Helper()
		var in []string
		for u, tk := range tok {
			if n.call(t, "GET", "/v1/conversations/"+convID, tk, nil).status == http.StatusOK {
				in = append(in, u)
			}
		}
		slices.Sort(in)
		return in
	}

	// The creator is owner and member whether or not members names them; duplicates count once.
	g := n.group(t, tok["alice"], "team", false, "bob", "carol", "bob")
	convID := g["conv_id"].(string)
	checkBrief(t, "group brief", g)
	wantFields(t, "group brief", g, map[string]any{"type": "group", "name": "team", "owner_id": "alice", "members_count": 3, "fanout": "write"})
	if got := members(convID); fmt.Sprint(got) != "[alice bob carol]" {
		t.Fatalf("members %v", got)
	}
	for _, u := range []string{"alice", "bob", "carol"} {
		ev := lastEvent(t, n, tok[u])
		wantFields(t, u+"'s conv_updated", ev, map[string]any{"type": "conv_updated", "conv_id": convID})
		wantFields(t, u+"'s conv_updated data", obj(t, ev["data"]), map[string]any{"members_count": 3, "owner_id": "alice"})
	}
	n.group(t, tok["bob"], "self-named", false, "bob", "alice") // naming yourself is fine

	n.send(t, tok["alice"], convID, "g1")
	n.send(t, tok["bob"], convID, "g2")

	t.Run("only the owner adds", func(t *testing.T) {
		n.fail(t, http.StatusForbidden, "POST", "/v1/conversations/"+convID+"/members", tok["bob"], map[string]any{"add": []string{"dave"}})
		n.fail(t, http.StatusForbidden, "POST", "/v1/conversations/"+convID+"/members", tok["bob"], map[string]any{"remove": []string{"carol"}})
		n.fail(t, http.StatusNotFound, "POST", "/v1/conversations/"+convID+"/members", tok["alice"], map[string]any{"add": []string{"nobody"}})
		b := n.ok(t, "POST", "/v1/conversations/"+convID+"/members", tok["alice"], map[string]any{"add": []string{"dave", "erin"}})
		checkBrief(t, "members answer", b)
		wantFields(t, "members answer", b, map[string]any{"members_count": 5})
		for _, u := range []string{"alice", "bob", "carol"} { // existing members hear of it too
			ev := lastEvent(t, n, tok[u])
			wantFields(t, u+"'s conv_updated on add", ev, map[string]any{"type": "conv_updated", "conv_id": convID})
			wantFields(t, u+"'s conv_updated data", obj(t, ev["data"]), map[string]any{"members_count": 5})
		}
	})
	t.Run("a member added later sees only later messages", func(t *testing.T) {
		ev := lastEvent(t, n, tok["dave"])
		wantFields(t, "dave's conv_updated", ev, map[string]any{"type": "conv_updated", "conv_id": convID})
		b := n.brief(t, tok["dave"], convID)
		wantFields(t, "dave's brief before any new message", b, map[string]any{"max_seq": 2, "unread": 0, "last_message": nil})
		if h := n.history(t, tok["dave"], convID, 0); len(h) != 0 {
			t.Fatalf("dave sees history from before he joined: %s", show(h))
		}
		n.send(t, tok["alice"], convID, "g3")
		wantFields(t, "dave's brief", n.brief(t, tok["dave"], convID), map[string]any{"max_seq": 3, "unread": 1})
		if h := seqs(n.history(t, tok["dave"], convID, 0)); fmt.Sprint(h) != "[3]" {
			t.Fatalf("dave's history seqs %v, want [3]", h)
		}
		page := n.ok(t, "GET", "/v1/conversations/"+convID+"/messages?before_seq=3", tok["dave"], nil)
		if len(arr(t, page["messages"])) != 0 || page["has_more"] != false {
			t.Fatalf("dave's page before 3: %s", show(page))
		}
		snap := obj(t, n.ok(t, "GET", "/v1/sync/snapshot", tok["dave"], nil)["messages"])
		if got := seqs(arr(t, snap[convID])); fmt.Sprint(got) != "[3]" {
			t.Fatalf("dave's snapshot messages %v, want [3]", got)
		}
		wantFields(t, "bob's brief", n.brief(t, tok["bob"], convID), map[string]any{"unread": 1})
	})
	t.Run("receipts read by N of M", func(t *testing.T) {
		path := "/v1/conversations/" + convID + "/receipts?seq=3"
		r := n.ok(t, "GET", path, tok["alice"], nil)
		wantKeys(t, "receipts", r, "seq", "member_count", "read_count", "delivered_count")
		receiptsAgree(t, n, path, tok["alice"], map[string]any{"seq": 3, "member_count": 4, "read_count": 0, "delivered_count": 0})
		n.ok(t, "POST", "/v1/conversations/"+convID+"/read", tok["bob"], map[string]any{"seq": 3})
		n.ok(t, "POST", "/v1/conversations/"+convID+"/delivered", tok["dave"], map[string]any{"seq": 3})
		receiptsAgree(t, n, path, tok["carol"], map[string]any{"member_count": 4, "read_count": 1, "delivered_count": 2})
		// In a group, a read event goes to the reader only, and delivered emits nothing.
		for _, u := range []string{"alice", "carol", "dave"} {
			for _, ev := range n.events(t, tok[u], 0) {
				if ev["type"] == "read" || ev["type"] == "delivered" {
					t.Fatalf("%s got %s for another member's group position", u, show(ev))
				}
			}
		}
		if ev := lastEvent(t, n, tok["bob"]); ev["type"] != "read" {
			t.Fatalf("bob's last event %s, want his read", show(ev))
		}
		// Seq 2 was sent by bob, so bob is not counted and alice (whose send of 3 moved her
		// positions) is. dave and erin joined after seq 2 and cannot see it, yet PROTOCOL 7
		// counts every member other than the sender: dave's delivered 3 counts for seq 2.
		wantFields(t, "receipts of bob's message", n.ok(t, "GET", "/v1/conversations/"+convID+"/receipts?seq=2", tok["alice"], nil),
			map[string]any{"member_count": 4, "read_count": 1, "delivered_count": 2})
	})
	t.Run("leave", func(t *testing.T) {
		b := n.ok(t, "POST", "/v1/conversations/"+convID+"/members", tok["carol"], map[string]any{"remove": []string{"carol"}})
		wantFields(t, "carol's answer", b, map[string]any{"members_count": 4})
		ev := lastEvent(t, n, tok["carol"])
		wantFields(t, "carol's conv_updated after leaving", ev, map[string]any{"type": "conv_updated", "conv_id": convID})
		wantFields(t, "carol's conv_updated data", obj(t, ev["data"]), map[string]any{"members_count": 4})
		n.fail(t, http.StatusNotFound, "GET", "/v1/conversations/"+convID, tok["carol"], nil)
		n.fail(t, http.StatusNotFound, "POST", "/v1/messages", tok["carol"], textMessage(convID, "gone"))
	})
	t.Run("removed by the owner", func(t *testing.T) {
		before := n.latest(t, tok["erin"])
		n.ok(t, "POST", "/v1/conversations/"+convID+"/members", tok["alice"], map[string]any{"remove": []string{"erin"}})
		evs := n.events(t, tok["erin"], before)
		if len(evs) != 1 || evs[0]["type"] != "conv_updated" || evs[0]["conv_id"] != convID {
			t.Fatalf("erin's events after removal: %s, want one conv_updated", show(evs))
		}
		n.fail(t, http.StatusNotFound, "GET", "/v1/conversations/"+convID+"/messages", tok["erin"], nil)
		if got := members(convID); fmt.Sprint(got) != "[alice bob dave]" {
			t.Fatalf("members %v", got)
		}
	})
	t.Run("owner leaves: the longest-standing member becomes owner", func(t *testing.T) {
		n.ok(t, "POST", "/v1/conversations/"+convID+"/members", tok["alice"], map[string]any{"remove": []string{"alice"}})
		for _, u := range []string{"bob", "dave"} {
			wantFields(t, u+"'s brief", n.brief(t, tok[u], convID), map[string]any{"owner_id": "bob", "members_count": 2})
			ev := lastEvent(t, n, tok[u])
			wantFields(t, u+"'s conv_updated", obj(t, ev["data"]), map[string]any{"owner_id": "bob"})
		}
		// The new owner may add; the old one no longer may do anything.
		n.ok(t, "POST", "/v1/conversations/"+convID+"/members", tok["bob"], map[string]any{"add": []string{"frank"}})
		n.fail(t, http.StatusNotFound, "POST", "/v1/conversations/"+convID+"/members", tok["alice"], map[string]any{"add": []string{"alice"}})
	})
}

// TestGroupReadDetail: a group created with read_detail lists the readers of a message.
func TestGroupReadDetail(t *testing.T) {
	n := start(t)
	alice, bob, carol := n.user(t, "alice"), n.user(t, "bob"), n.user(t, "carol")
	convID := n.group(t, alice, "detail", true, "bob", "carol")["conv_id"].(string)
	n.send(t, alice, convID, "d1")
	path := "/v1/conversations/" + convID + "/receipts?seq=1"
	steps := []struct {
		name   string
		reader string
		want   map[string]any
	}{
		{"none read", "", map[string]any{"member_count": 2, "read_count": 0, "delivered_count": 0, "readers": []any{}}},
		{"bob read", bob, map[string]any{"member_count": 2, "read_count": 1, "delivered_count": 1, "readers": []any{"bob"}}},
		{"both read", carol, map[string]any{"member_count": 2, "read_count": 2, "delivered_count": 2}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if s.reader != "" {
				n.ok(t, "POST", "/v1/conversations/"+convID+"/read", s.reader, map[string]any{"seq": 1})
			}
			r := n.ok(t, "GET", path, alice, nil)
			wantKeys(t, "receipts", r, "seq", "member_count", "read_count", "delivered_count", "readers")
			wantFields(t, "receipts", r, s.want)
		})
	}
	r := n.ok(t, "GET", path, alice, nil)
	readers := []string{}
	for _, u := range r["readers"].([]any) {
		readers = append(readers, u.(string))
	}
	slices.Sort(readers)
	if fmt.Sprint(readers) != "[bob carol]" {
		t.Fatalf("readers %v", readers)
	}
}

// receiptsAgree checks the receipts at path against want. One node answers at once; on
// several, a node may count members as they were until 5 s after a member change another
// node made (docs/protocol.md section 7.2), so the answer is polled until it agrees.
func receiptsAgree(t *testing.T, n *node, path, token string, want map[string]any) {
	t.Helper()
	if !cluster() {
		wantFields(t, "receipts", n.ok(t, "GET", path, token, nil), want)
		return
	}
	var last map[string]any
	eventually(t, "receipts "+show(want), func() bool {
		last = n.ok(t, "GET", path, token, nil)
		for k, w := range want {
			if num(last[k]) != int64(w.(int)) {
				return false
			}
		}
		return true
	})
}

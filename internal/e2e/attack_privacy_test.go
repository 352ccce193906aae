package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"net/http"
	"strings"
	"testing"

	"github.com/parleychat/parley/internal/parleytest"
	"github.com/parleychat/parley/internal/server"
	"github.com/parleychat/parley/internal/store"
)

// legacyDirectID is the direct conv_id older servers derived from the pair alone (no key):
// anyone could compute it, which is what made the who-talks-to-whom probe work.
func legacyDirectID(a, b string) string {
	if a > b {
		a, b = b, a
	}
	sum := sha256.Sum256([]byte(a + "\x00" + b))
	return "d_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:16]))
}

// probe is one request a stranger makes naming a conversation.
type probe struct {
	name, method, path string
	body               any
}

// probes are every HTTP call that names a conversation, for convID.
func probes(convID string) []probe {
	base := "/v1/conversations/" + convID
	return []probe{
		{"get", "GET", base, nil},
		{"history", "GET", base + "/messages", nil},
		{"read", "POST", base + "/read", map[string]any{"seq": 1}},
		{"delivered", "POST", base + "/delivered", map[string]any{"seq": 1}},
		{"receipts", "GET", base + "/receipts?seq=1", nil},
		{"members", "POST", base + "/members", map[string]any{"add": []string{"mallory"}}},
		{"rename", "PATCH", base, map[string]any{"name": "mine"}},
		{"delete", "DELETE", base, nil},
		{"send", "POST", "/v1/messages", textMessage(convID, "probe")},
		{"recall", "POST", "/v1/messages/recall", map[string]any{"conv_id": convID, "seq": 1}},
	}
}

// wsProbes are the WebSocket ops that name a conversation, for convID.
func wsProbes(convID string) []probe {
	return []probe{
		{"send", "send", "", textMessage(convID, "probe-ws")},
		{"read", "read", "", map[string]any{"conv_id": convID, "seq": 1}},
		{"delivered", "delivered", "", map[string]any{"conv_id": convID, "seq": 1}},
		{"recall", "recall", "", map[string]any{"conv_id": convID, "seq": 1}},
	}
}

// TestAttackProbeWhoTalks performs the who-talks-to-whom probe: a stranger names existing
// conversations (a direct one, whose id leaked, and a group) and missing ones on every route
// and WebSocket op, and must get byte-identical answers (404) for both, so that the answer
// tells nothing. The members' conversations are untouched afterwards.
func TestAttackProbeWhoTalks(t *testing.T) {
	n := start(t)
	alice := n.user(t, "alice")
	n.user(t, "bob")
	mallory := n.user(t, "mallory")
	direct := n.direct(t, alice, "bob")["conv_id"].(string)
	group := n.group(t, alice, "secret club", true, "bob")["conv_id"].(string)
	n.send(t, alice, direct, "d1")
	n.send(t, alice, group, "g1")
	missing := map[string]string{
		direct: "d_" + strings.Repeat("a", 26),
		group:  "g_" + strings.Repeat("a", 26),
	}
	ws := n.dial(t, mallory, -1)
	for existing, absent := range missing {
		for i, p := range probes(existing) {
			q := probes(absent)[i]
			t.Run(p.name+" "+existing[:2], func(t *testing.T) {
				got := n.fail(t, http.StatusNotFound, p.method, p.path, mallory, p.body)
				want := n.fail(t, http.StatusNotFound, q.method, q.path, mallory, q.body)
				if string(got.raw) != string(want.raw) {
					t.Fatalf("a stranger tells an existing conversation from a missing one:\nexisting %s\nmissing  %s", got.raw, want.raw)
				}
			})
		}
		for i, p := range wsProbes(existing) {
			q := wsProbes(absent)[i]
			t.Run("ws "+p.name+" "+existing[:2], func(t *testing.T) {
				got, want := ws.do(p.method, p.body.(map[string]any)), ws.do(q.method, q.body.(map[string]any))
				delete(got, "id")
				delete(want, "id")
				wantFields(t, "reply for an existing conversation", got, map[string]any{"code": 404})
				if show(got) != show(want) {
					t.Fatalf("a stranger tells an existing conversation from a missing one over the WebSocket:\nexisting %s\nmissing  %s", show(got), show(want))
				}
			})
		}
	}
	for _, convID := range []string{direct, group} {
		wantFields(t, "the probed conversation", n.brief(t, alice, convID), map[string]any{"max_seq": 1, "members_count": 2, "owner_id": map[string]string{direct: "", group: "alice"}[convID]})
	}
}

// TestAttackComputeDirectID performs the first step of the probe: computing the id of a
// pair's direct conversation. The id a server gives a pair must be neither the unkeyed hash
// anyone can compute nor the id another server (another key) gives the same pair; it must
// stay the same across a restart on the same data directory.
func TestAttackComputeDirectID(t *testing.T) {
	ids := make([]string, 2)
	nodes := make([]*node, 2)
	for i := range nodes {
		nodes[i] = start(t)
		alice := nodes[i].user(t, "alice")
		nodes[i].user(t, "bob")
		ids[i] = nodes[i].direct(t, alice, "bob")["conv_id"].(string)
	}
	legacy := legacyDirectID("alice", "bob")
	if ids[0] == legacy || ids[1] == legacy {
		t.Fatalf("direct ids %v: the pair's id is the unkeyed hash %s anyone can compute", ids, legacy)
	}
	if ids[0] == ids[1] {
		t.Fatalf("two servers gave the pair the same direct id %s: it does not depend on a server key", ids[0])
	}
	nodes[0].fail(t, http.StatusNotFound, "GET", "/v1/conversations/"+legacy, nodes[0].user(t, "mallory"), nil)

	nodes[0].Stop(t)
	again := &node{parleytest.StartWith(t, restartConfig(nodes[0]))}
	if got := again.direct(t, again.Token(t, "bob", "d2"), "alice")["conv_id"]; got != ids[0] {
		t.Fatalf("after a restart the pair's direct id is %v, was %s: the key did not persist", got, ids[0])
	}
}

// restartConfig is the configuration to start a node again on n's data directory.
func restartConfig(n *node) server.Config {
	cfg := server.DefaultConfig(n.Dir)
	cfg.AdminSecret = "test-admin-secret-0123456789abcdef"
	cfg.Engine, cfg.PostgresURL, cfg.BlobStore = n.Config.Engine, n.Config.PostgresURL, n.Config.BlobStore
	return cfg
}

// TestLegacyDirectIDKept starts a server on a data directory holding a direct conversation
// under its legacy (unkeyed) id, as an older server wrote it: creating the pair's direct
// conversation must find it rather than make a second one, for either user, while a new
// pair gets a keyed id.
func TestLegacyDirectIDKept(t *testing.T) {
	old := start(t)
	for _, u := range []string{"alice", "bob", "carol"} {
		old.user(t, u)
	}
	old.Stop(t)
	legacy := legacyDirectID("alice", "bob")
	writeLegacyDirect(t, old.Config, legacy, "alice", "bob")

	n := &node{parleytest.StartWith(t, restartConfig(old))}
	alice, bob := n.Token(t, "alice", "d1"), n.Token(t, "bob", "d1")
	for _, tok := range []string{alice, bob} {
		peer := map[string]string{alice: "bob", bob: "alice"}[tok]
		if got := n.direct(t, tok, peer)["conv_id"]; got != legacy {
			t.Fatalf("direct with %s = %v, want the existing legacy conversation %s", peer, got, legacy)
		}
	}
	n.send(t, alice, legacy, "after-upgrade")
	if got := n.history(t, bob, legacy, 0); len(got) != 1 {
		t.Fatalf("bob sees %d messages in the legacy conversation, want 1", len(got))
	}
	if list := n.listed(t, alice); len(list) != 1 {
		t.Fatalf("alice lists %d conversations, want the one legacy conversation: %s", len(list), show(list))
	}
	if got := n.direct(t, alice, "carol")["conv_id"]; got == legacyDirectID("alice", "carol") {
		t.Fatalf("a new pair got the unkeyed id %v", got)
	}
}

// writeLegacyDirect stores the direct conversation of a and b under id in the data
// directory dir, with the server stopped, as a server from before keyed ids did.
func writeLegacyDirect(t *testing.T, cfg server.Config, id, a, b string) {
	t.Helper()
	ctx := context.Background()
	st, err := server.OpenStore(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	err = st.Update(ctx, func(tx store.Tx) error {
		c := store.Conversation{ID: id, Type: "direct", MembersCount: 2, CreatedAt: 1, UpdatedAt: 1}
		if err := tx.CreateConversation(ctx, c); err != nil {
			return err
		}
		for i, u := range []string{a, b} {
			if err := tx.PutMember(ctx, store.Member{ConvID: id, UserID: u, JoinedAt: 1, Ordinal: int64(i + 1)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestAttackLateJoinerReceipts performs the late joiner's look back: dave, added to a group
// after two messages, asks for their receipts (who read what before he was there) and
// whether they were recalled. He must get the answer for a message that does not exist, and
// no recall event for a message he never saw, while the members who saw it get theirs.
func TestAttackLateJoinerReceipts(t *testing.T) {
	n := start(t)
	alice := n.user(t, "alice")
	bob := n.user(t, "bob")
	dave := n.user(t, "dave")
	convID := n.group(t, alice, "detail", true, "bob")["conv_id"].(string)
	n.send(t, alice, convID, "before-1")
	n.send(t, alice, convID, "before-2")
	n.ok(t, "POST", "/v1/conversations/"+convID+"/read", bob, map[string]any{"seq": 2})
	n.ok(t, "POST", "/v1/conversations/"+convID+"/members", alice, map[string]any{"add": []string{"dave"}})
	path := "/v1/conversations/" + convID + "/receipts?seq="

	missing := n.fail(t, http.StatusNotFound, "GET", path+"3", dave, nil)
	for _, seq := range []string{"1", "2"} {
		got := n.fail(t, http.StatusNotFound, "GET", path+seq, dave, nil)
		if string(got.raw) != string(missing.raw) {
			t.Fatalf("receipts of seq %s, sent before dave joined: %s; a missing message: %s", seq, got.raw, missing.raw)
		}
	}
	wantFields(t, "bob's receipts of seq 1", n.ok(t, "GET", path+"1", bob, nil), map[string]any{"read_count": 1})

	n.send(t, alice, convID, "after")
	wantFields(t, "dave's receipts of seq 3", n.ok(t, "GET", path+"3", dave, nil), map[string]any{"seq": 3})

	daveCursor, bobCursor := n.latest(t, dave), n.latest(t, bob)
	n.ok(t, "POST", "/v1/messages/recall", alice, map[string]any{"conv_id": convID, "seq": 1})
	if evs := n.events(t, bob, bobCursor); len(evs) != 1 || evs[0]["type"] != "recall" {
		t.Fatalf("bob's events after the recall: %s, want one recall", show(evs))
	}
	n.ok(t, "POST", "/v1/messages/recall", alice, map[string]any{"conv_id": convID, "seq": 3})
	evs := n.events(t, dave, daveCursor)
	if len(evs) != 1 || num(obj(t, evs[0]["data"])["seq"]) != 3 {
		t.Fatalf("dave's events after recalls of seq 1 (before he joined) and 3: %s, want only the recall of 3", show(evs))
	}
}

// TestAttackSnapshotReadPositions performs the snapshot look at other members' reading: in
// a group without read_detail a member sees only counts, so neither the snapshot nor
// receipts may list who read how far; a read_detail group and a direct conversation do.
func TestAttackSnapshotReadPositions(t *testing.T) {
	n := start(t)
	alice := n.user(t, "alice")
	bob := n.user(t, "bob")
	n.user(t, "carol")
	plain := n.group(t, alice, "plain", false, "bob", "carol")["conv_id"].(string)
	detail := n.group(t, alice, "detail", true, "bob", "carol")["conv_id"].(string)
	direct := n.direct(t, alice, "bob")["conv_id"].(string)
	for _, c := range []string{plain, detail, direct} {
		n.send(t, alice, c, "m-"+c)
		n.ok(t, "POST", "/v1/conversations/"+c+"/read", bob, map[string]any{"seq": 1})
	}
	pos := obj(t, n.ok(t, "GET", "/v1/sync/snapshot?recent=0", alice, nil)["read_positions"])
	if p, ok := pos[plain]; ok {
		t.Fatalf("the snapshot shows read positions in a group without read_detail: %s", show(p))
	}
	wantFields(t, "read_detail group positions", obj(t, pos[detail]), map[string]any{"alice": 1, "bob": 1, "carol": 0})
	wantFields(t, "direct positions", obj(t, pos[direct]), map[string]any{"alice": 1, "bob": 1})

	r := n.ok(t, "GET", "/v1/conversations/"+plain+"/receipts?seq=1", alice, nil)
	wantKeys(t, "receipts without read_detail", r, "seq", "member_count", "read_count", "delivered_count")
	wantFields(t, "receipts without read_detail", r, map[string]any{"read_count": 1, "member_count": 2})
	r = n.ok(t, "GET", "/v1/conversations/"+detail+"/receipts?seq=1", alice, nil)
	wantFields(t, "receipts with read_detail", r, map[string]any{"readers": []string{"bob"}})
}

// TestRemovedMemberIsTold checks that a member who is removed (by the owner) or leaves is
// told so: the conv_updated they get, pushed on their open WebSocket and in their log, and
// the answer to their own leave say "removed": true, which no other brief carries.
// Afterwards the conversation answers them as a missing one, and their list and snapshot no
// longer hold it.
func TestRemovedMemberIsTold(t *testing.T) {
	n := start(t)
	alice := n.user(t, "alice")
	bob := n.user(t, "bob")
	carol := n.user(t, "carol")
	convID := n.group(t, alice, "team", false, "bob", "carol")["conv_id"].(string)
	n.send(t, alice, convID, "hello")
	carolWS := n.dial(t, carol, n.latest(t, carol))
	carolWS.ping()
	bobCursor := n.latest(t, bob)

	b := n.ok(t, "POST", "/v1/conversations/"+convID+"/members", alice, map[string]any{"remove": []string{"carol"}})
	checkBrief(t, "the owner's answer", b)
	ev := carolWS.event()
	wantFields(t, "carol's pushed event", ev, map[string]any{"type": "conv_updated", "conv_id": convID})
	wantFields(t, "carol's conv_updated", obj(t, ev["data"]), map[string]any{"removed": true, "members_count": 2})
	for _, e := range n.events(t, bob, bobCursor) {
		checkBrief(t, "bob's conv_updated on carol's removal (no removed field)", obj(t, e["data"]))
	}
	missing := n.fail(t, http.StatusNotFound, "GET", "/v1/conversations/g_"+strings.Repeat("a", 26), carol, nil)
	if got := n.fail(t, http.StatusNotFound, "GET", "/v1/conversations/"+convID, carol, nil); string(got.raw) != string(missing.raw) {
		t.Fatalf("carol, removed, gets %s; a missing conversation %s", got.raw, missing.raw)
	}
	if find(n.listed(t, carol), convID) != nil {
		t.Fatal("carol's list still holds the group she was removed from")
	}
	if _, ok := obj(t, n.ok(t, "GET", "/v1/sync/snapshot", carol, nil)["messages"])[convID]; ok {
		t.Fatal("carol's snapshot still holds the group she was removed from")
	}

	left := n.ok(t, "POST", "/v1/conversations/"+convID+"/members", bob, map[string]any{"remove": []string{"bob"}})
	wantFields(t, "bob's answer to leaving", left, map[string]any{"removed": true, "members_count": 1})
	wantFields(t, "bob's conv_updated on leaving", obj(t, lastEvent(t, n, bob)["data"]), map[string]any{"removed": true})
	checkBrief(t, "alice's conv_updated on bob leaving", obj(t, lastEvent(t, n, alice)["data"]))
}

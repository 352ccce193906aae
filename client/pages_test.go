package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/parleychat/parley/protocol"
)

// pagedServer answers the paged calls in two pages each, checking that the second request
// carries the first page's next token.
func pagedServer(t *testing.T) *httptest.Server {
	t.Helper()
	page := func(w http.ResponseWriter, r *http.Request, first, second any) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Query().Get("after") {
		case "":
			_ = json.NewEncoder(w).Encode(first)
		case "tok1":
			_ = json.NewEncoder(w).Encode(second)
		default:
			http.Error(w, `{"code":400,"error":"bad after"}`, http.StatusBadRequest)
		}
	}
	brief := func(id string) ConversationBrief { return ConversationBrief{ConvID: id} }
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/conversations", func(w http.ResponseWriter, r *http.Request) {
		page(w, r,
			protocol.ConversationList{Conversations: []ConversationBrief{brief("g_a")}, HasMore: true, Next: "tok1"},
			protocol.ConversationList{Conversations: []ConversationBrief{brief("g_b")}})
	})
	mux.HandleFunc("GET /v1/sync/snapshot", func(w http.ResponseWriter, r *http.Request) {
		page(w, r,
			SyncSnapshot{Cursor: 7, Conversations: []ConversationBrief{brief("g_a")}, HasMore: true, Next: "tok1",
				Messages: map[string][]Message{"g_a": {{Seq: 1}}}, ReadPositions: map[string]map[string]int64{"g_a": {"u": 1}}},
			SyncSnapshot{Cursor: 7, Conversations: []ConversationBrief{brief("g_b")},
				Messages: map[string][]Message{"g_b": {}}, ReadPositions: map[string]map[string]int64{}})
	})
	mux.HandleFunc("GET /v1/conversations/g_a/members", func(w http.ResponseWriter, r *http.Request) {
		page(w, r,
			protocol.MembersPage{Members: []Member{{UserID: "u", Role: protocol.RoleOwner}}, HasMore: true, Next: "tok1"},
			protocol.MembersPage{Members: []Member{{UserID: "v", Role: protocol.RoleMember}}})
	})
	mux.HandleFunc("GET /v1/me", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(Me{UserID: "u", DeviceID: "d", Name: "U"})
	})
	mux.HandleFunc("GET /v1/users/{id}", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(User{UserID: r.PathValue("id"), Name: "V"})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// TestPagedCallsFollowEveryPage: the SDK's list calls return the whole result however many
// pages the server splits it into.
func TestPagedCallsFollowEveryPage(t *testing.T) {
	c := New(Options{BaseURL: pagedServer(t).URL, Token: "t"})
	ctx := context.Background()

	list, err := c.ListConversations(ctx)
	if err != nil || len(list) != 2 || list[0].ConvID != "g_a" || list[1].ConvID != "g_b" {
		t.Fatalf("ListConversations = %+v, %v", list, err)
	}
	snap, err := c.Snapshot(ctx, 20)
	if err != nil || snap.Cursor != 7 || len(snap.Conversations) != 2 || len(snap.Messages) != 2 ||
		len(snap.Messages["g_a"]) != 1 || snap.ReadPositions["g_a"]["u"] != 1 || snap.HasMore || snap.Next != "" {
		t.Fatalf("Snapshot = %+v, %v", snap, err)
	}
	ms, err := c.Members(ctx, "g_a")
	if err != nil || len(ms) != 2 || ms[0].UserID != "u" || ms[1].UserID != "v" {
		t.Fatalf("Members = %+v, %v", ms, err)
	}
}

// TestMeAndUser: the SDK's identity calls decode the server's answers.
func TestMeAndUser(t *testing.T) {
	c := New(Options{BaseURL: pagedServer(t).URL, Token: "t"})
	me, err := c.Me(context.Background())
	if err != nil || me != (Me{UserID: "u", DeviceID: "d", Name: "U"}) {
		t.Fatalf("Me = %+v, %v", me, err)
	}
	u, err := c.User(context.Background(), "v")
	if err != nil || u != (User{UserID: "v", Name: "V"}) {
		t.Fatalf("User = %+v, %v", u, err)
	}
}

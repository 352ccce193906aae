package client

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strconv"

	"github.com/parleychat/parley/protocol"
)

// This file holds the calls whose answers come in pages (section 5.4, 5.5, 8.2). Each
// method follows the pages to the end and returns the whole result, so that callers see one
// answer as before paging existed.

// Member is one member of a conversation as Members lists it; Me is what Me answers.
type (
	Member = protocol.Member
	Me     = protocol.Me
)

// eachPage GETs path with query, and then again with after=<next> while the answer says
// has_more, handing every page to visit. next reads a page's has_more and next.
func eachPage[P any](ctx context.Context, t *transport, path string, query url.Values, next func(*P) (bool, string), visit func(*P)) error {
	q := maps.Clone(query)
	if q == nil {
		q = url.Values{}
	}
	q.Set("limit", strconv.Itoa(protocol.MaxListLimit))
	for {
		var p P
		if _, err := t.do(ctx, http.MethodGet, path, q, nil, &p); err != nil {
			return err
		}
		visit(&p)
		more, token := next(&p)
		if !more {
			return nil
		}
		if token == "" || token == q.Get("after") {
			return fmt.Errorf("parley: GET %s: has_more without a new next token", path)
		}
		q.Set("after", token)
	}
}

// ListConversations returns the caller's visible conversations, most recently active first,
// following every page.
func (c *Client) ListConversations(ctx context.Context) ([]ConversationBrief, error) {
	out := []ConversationBrief{}
	err := eachPage(ctx, &c.http, "/v1/conversations", nil,
		func(p *protocol.ConversationList) (bool, string) { return p.HasMore, p.Next },
		func(p *protocol.ConversationList) { out = append(out, p.Conversations...) })
	return out, err
}

// Snapshot returns the state a new device starts from: conversations, the latest recent
// messages of each (0 gives none, the cheap way to learn the current cursor) and the cursor
// to sync from. It assembles every page into one SyncSnapshot (section 8.2): a conversation
// that changed while the pages were fetched may be missing or newer than the cursor, and
// the events after the cursor bring it.
func (c *Client) Snapshot(ctx context.Context, recent int) (SyncSnapshot, error) {
	var out SyncSnapshot
	query := url.Values{"recent": {strconv.Itoa(recent)}}
	err := eachPage(ctx, &c.http, "/v1/sync/snapshot", query,
		func(p *SyncSnapshot) (bool, string) { return p.HasMore, p.Next },
		func(p *SyncSnapshot) { mergeSnapshot(&out, p) })
	out.HasMore, out.Next = false, ""
	return out, err
}

// mergeSnapshot adds page to snap; the first page sets the cursor.
func mergeSnapshot(snap, page *SyncSnapshot) {
	if snap.Conversations == nil {
		*snap = *page
		return
	}
	snap.Conversations = append(snap.Conversations, page.Conversations...)
	maps.Copy(snap.Messages, page.Messages)
	maps.Copy(snap.ReadPositions, page.ReadPositions)
}

// Members returns the members of a conversation in order of standing, with their names and
// roles, following every page. 404: no such conversation, or the caller is not a member (the server answers both alike).
func (c *Client) Members(ctx context.Context, convID string) ([]Member, error) {
	out := []Member{}
	err := eachPage(ctx, &c.http, convPath(convID, "/members"), nil,
		func(p *protocol.MembersPage) (bool, string) { return p.HasMore, p.Next },
		func(p *protocol.MembersPage) { out = append(out, p.Members...) })
	return out, err
}

// Me returns who the client's token speaks for: user, device and the user's name.
func (c *Client) Me(ctx context.Context) (Me, error) {
	var out Me
	_, err := c.http.do(ctx, http.MethodGet, "/v1/me", nil, nil, &out)
	return out, err
}

// User returns a user's id and name. 404: no such user.
func (c *Client) User(ctx context.Context, userID string) (User, error) {
	var out User
	_, err := c.http.do(ctx, http.MethodGet, "/v1/users/"+url.PathEscape(userID), nil, nil, &out)
	return out, err
}

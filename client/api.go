package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/parleychat/parley/protocol"
)

// This file holds the one-call-one-request HTTP methods (sections 5-8). None of them retries:
// they are either idempotent for the caller to repeat or, like Send's HTTP leg, wrapped by
// something that knows how to repeat them safely.

// CreateDirect returns the direct conversation with peerID, creating it if needed. Both users
// get the same conversation whoever calls first. 404: unknown peer; 400: peerID is the caller.
func (c *Client) CreateDirect(ctx context.Context, peerID string) (ConversationBrief, error) {
	var out ConversationBrief
	req := protocol.CreateConversationRequest{Type: protocol.TypeDirect, PeerID: peerID}
	_, err := c.http.do(ctx, http.MethodPost, "/v1/conversations", nil, req, &out)
	return out, err
}

// CreateGroup creates a group owned by the caller, who is a member whether or not members
// names them. readDetail keeps per-member read lists for Receipts. 404: unknown member; 400:
// more than protocol.MaxRequestListLen entries in members (add the rest with UpdateMembers).
func (c *Client) CreateGroup(ctx context.Context, name string, members []string, readDetail bool) (ConversationBrief, error) {
	var out ConversationBrief
	req := protocol.CreateConversationRequest{
		Type: protocol.TypeGroup, Name: name, Members: nonNil(members), ReadDetail: readDetail,
	}
	_, err := c.http.do(ctx, http.MethodPost, "/v1/conversations", nil, req, &out)
	return out, err
}

// UpdateMembers adds and removes group members. Owner only (403), except that any member may
// remove themselves: that answer has Removed set, as has the conv_updated every removed
// member gets, and the conversation then answers them 404.
func (c *Client) UpdateMembers(ctx context.Context, convID string, add, remove []string) (ConversationBrief, error) {
	var out ConversationBrief
	req := protocol.MembersRequest{Add: nonNil(add), Remove: nonNil(remove)}
	_, err := c.http.do(ctx, http.MethodPost, convPath(convID, "/members"), nil, req, &out)
	return out, err
}

// Rename sets a group's name (owner only). This is a Parley extension:
// PATCH /v1/conversations/{conv_id} {"name"}.
func (c *Client) Rename(ctx context.Context, convID, name string) (ConversationBrief, error) {
	var out ConversationBrief
	req := protocol.RenameRequest{Name: &name}
	_, err := c.http.do(ctx, http.MethodPatch, convPath(convID, ""), nil, req, &out)
	return out, err
}

// SetRetention sets a group's own retention in seconds (owner only), within the server's
// bounds (400 outside them); 0 clears it, and the server's retention applies again. This
// is a Parley extension: PATCH /v1/conversations/{conv_id} {"retention_seconds"}.
func (c *Client) SetRetention(ctx context.Context, convID string, seconds int64) (ConversationBrief, error) {
	var out ConversationBrief
	req := protocol.RenameRequest{RetentionSeconds: &seconds}
	_, err := c.http.do(ctx, http.MethodPatch, convPath(convID, ""), nil, req, &out)
	return out, err
}

// GetConversation returns one conversation as the caller sees it. 404: no such conversation,
// or the caller is not a member (the server answers both alike).
func (c *Client) GetConversation(ctx context.Context, convID string) (ConversationBrief, error) {
	var out ConversationBrief
	_, err := c.http.do(ctx, http.MethodGet, convPath(convID, ""), nil, nil, &out)
	return out, err
}

// DeleteConversation hides the conversation on all of the caller's devices and clears their
// history up to its current max_seq.
func (c *Client) DeleteConversation(ctx context.Context, convID string) error {
	_, err := c.http.do(ctx, http.MethodDelete, convPath(convID, ""), nil, nil, nil)
	return err
}

// HistoryQuery selects a page of History. With BeforeSeq > 0 it is the Limit visible messages
// just below BeforeSeq; otherwise those just above AfterSeq. Pages are always ascending.
type HistoryQuery struct {
	AfterSeq  int64
	BeforeSeq int64
	Limit     int // 0: the server's default (50); larger than 200 is clamped by the server
}

// History returns a page of a conversation's visible messages.
func (c *Client) History(ctx context.Context, convID string, q HistoryQuery) (MessagesPage, error) {
	query := url.Values{}
	if q.BeforeSeq > 0 {
		query.Set("before_seq", strconv.FormatInt(q.BeforeSeq, 10))
	} else {
		query.Set("after_seq", strconv.FormatInt(q.AfterSeq, 10))
	}
	if q.Limit > 0 {
		query.Set("limit", strconv.Itoa(q.Limit))
	}
	var out MessagesPage
	_, err := c.http.do(ctx, http.MethodGet, convPath(convID, "/messages"), query, nil, &out)
	return out, err
}

// MessagesAround jumps to a date: it returns up to limit of the conversation's visible
// messages around the first one created at or after ts, about half before it and the rest
// from it on, ascending (0: the server's default page). The page's AnchorSeq is that
// message, 0 when every visible message is older (the page is then the newest ones);
// HasMoreBefore and HasMoreAfter tell whether History with BeforeSeq (the first seq of the
// page) and AfterSeq (its last) has more to give, for scrolling both ways from there.
func (c *Client) MessagesAround(ctx context.Context, convID string, ts time.Time, limit int) (MessagesPage, error) {
	query := url.Values{"around_ts": {strconv.FormatInt(max(ts.UnixMilli(), 1), 10)}} // the server takes 1 and up
	if limit > 0 {
		query.Set("limit", strconv.Itoa(limit))
	}
	var out MessagesPage
	_, err := c.http.do(ctx, http.MethodGet, convPath(convID, "/messages"), query, nil, &out)
	return out, err
}

// MarkRead advances the caller's read position to seq (positions never move back) and
// returns the position now in force.
func (c *Client) MarkRead(ctx context.Context, convID string, seq int64) (int64, error) {
	var out protocol.ReadPosition
	req := protocol.PositionRequest{Seq: &seq}
	_, err := c.http.do(ctx, http.MethodPost, convPath(convID, "/read"), nil, req, &out)
	if err == nil {
		c.rooms.ownRead(convID, out.ReadSeq) // unread of a read-fanout conversation drops now
	}
	return out.ReadSeq, err
}

// MarkDelivered advances the caller's delivered position to seq and returns the position now
// in force. AutoDelivered does this by itself.
func (c *Client) MarkDelivered(ctx context.Context, convID string, seq int64) (int64, error) {
	var out protocol.DeliveredPosition
	req := protocol.PositionRequest{Seq: &seq}
	_, err := c.http.do(ctx, http.MethodPost, convPath(convID, "/delivered"), nil, req, &out)
	return out.DeliveredSeq, err
}

// Receipts counts the members (other than its sender) who have read and received message seq;
// Readers is set only in direct conversations and read_detail groups. 404 also for a message
// the caller cannot see (sent before they joined, or cleared).
func (c *Client) Receipts(ctx context.Context, convID string, seq int64) (Receipts, error) {
	var out Receipts
	query := url.Values{"seq": {strconv.FormatInt(seq, 10)}}
	_, err := c.http.do(ctx, http.MethodGet, convPath(convID, "/receipts"), query, nil, &out)
	return out, err
}

// Recall nulls the content of message seq, sent by the caller within the recall window (403
// otherwise). Recalling twice succeeds.
func (c *Client) Recall(ctx context.Context, convID string, seq int64) error {
	req := protocol.RecallRequest{ConvID: convID, Seq: &seq}
	_, err := c.http.do(ctx, http.MethodPost, "/v1/messages/recall", nil, req, nil)
	return err
}

// Sync returns up to limit events after cursor (0: the server's default of 100). With wait >
// 0 and nothing to return, the server holds the call up to wait (at most 30s, whole seconds)
// for an event. 410: cursor too old, take a Snapshot; 409: cursor ahead of the server.
// It sends mark 0; SyncWith sends a mark.
//
// Sync is the raw call; a running session already delivers every event to OnEvent.
func (c *Client) Sync(ctx context.Context, cursor int64, limit int, wait time.Duration) (SyncResponse, error) {
	return c.SyncWith(ctx, SyncQuery{Cursor: cursor, Limit: limit, Wait: wait})
}

// SyncQuery selects what SyncWith returns.
type SyncQuery struct {
	Cursor int64         // events after this cursor
	Mark   int64         // read-fanout conversations changed after this mark (section 10)
	Limit  int           // 0: the server's default of 100
	Wait   time.Duration // long-poll up to this long (whole seconds, at most 30s)
}

// SyncWith is Sync with a mark: the answer's Conversations are the briefs of the caller's
// read-fanout conversations with a message after q.Mark, and its Mark the one to send next.
func (c *Client) SyncWith(ctx context.Context, q SyncQuery) (SyncResponse, error) {
	query := url.Values{"cursor": {strconv.FormatInt(q.Cursor, 10)}}
	if q.Mark > 0 {
		query.Set("mark", strconv.FormatInt(q.Mark, 10))
	}
	if q.Limit > 0 {
		query.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Wait > 0 {
		secs := int64((q.Wait + time.Second - 1) / time.Second)
		query.Set("wait", strconv.FormatInt(secs, 10))
	}
	var out SyncResponse
	_, err := c.http.do(ctx, http.MethodGet, "/v1/sync", query, nil, &out)
	return out, err
}

// nonNil makes a nil list encode as [] rather than null, which a strict server may refuse.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

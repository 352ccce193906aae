// Package protocol holds the Parley wire types: the one definition of every JSON body and
// WebSocket frame that crosses the network (see docs/protocol.md). It imports only the
// standard library so that the server, the Go client SDK and the load tool share it.
package protocol

import "encoding/json"

// Conversation types.
const (
	TypeDirect = "direct"
	TypeGroup  = "group"
)

// Fanout (delivery) models, section 10.
const (
	FanoutWrite = "write"
	FanoutRead  = "read"
)

// Sync event types, section 8.
const (
	EventMessage     = "message"
	EventRead        = "read"
	EventDelivered   = "delivered"
	EventRecall      = "recall"
	EventConvDeleted = "conv_deleted"
	EventConvUpdated = "conv_updated"
)

// MsgState values as the sender of a direct message sees them (section 6).
const (
	StateSending   = 1
	StateSent      = 2
	StateDelivered = 3
	StateRead      = 4
	StateRecalled  = 5
)

// Message is one stored message. Content and Extra are null once recalled.
type Message struct {
	ConvID      string            `json:"conv_id"`
	Seq         int64             `json:"seq"`
	MsgID       string            `json:"msg_id"`
	ClientMsgID string            `json:"client_msg_id"`
	SenderID    string            `json:"sender_id"`
	ContentType int               `json:"content_type"`
	Content     json.RawMessage   `json:"content"`
	Extra       map[string]string `json:"extra"`
	CreatedAt   int64             `json:"created_at"`
	Recalled    bool              `json:"recalled"`
	Mentions    []string          `json:"mentions,omitempty"` // as sent, repeats removed; absent when none
}

// MessageAck answers a send. Duplicate is true when the (sender, client_msg_id) pair was
// already stored: the ack is then the original one.
type MessageAck struct {
	Code        int    `json:"code"`
	ConvID      string `json:"conv_id"`
	ClientMsgID string `json:"client_msg_id"`
	MsgID       string `json:"msg_id"`
	Seq         int64  `json:"seq"`
	CreatedAt   int64  `json:"created_at"`
	Duplicate   bool   `json:"duplicate"`
}

// ConversationBrief is a conversation as one user sees it: the per-user fields (read_seq,
// unread, cleared_seq, ...) are that user's.
type ConversationBrief struct {
	ConvID           string   `json:"conv_id"`
	Type             string   `json:"type"`
	Name             string   `json:"name"`
	OwnerID          string   `json:"owner_id"`
	MembersCount     int      `json:"members_count"`
	Fanout           string   `json:"fanout"`
	MaxSeq           int64    `json:"max_seq"`
	ReadSeq          int64    `json:"read_seq"`
	DeliveredSeq     int64    `json:"delivered_seq"`
	ClearedSeq       int64    `json:"cleared_seq"`
	Unread           int64    `json:"unread"`
	LastMessage      *Message `json:"last_message"`
	PeerReadSeq      *int64   `json:"peer_read_seq,omitempty"`
	PeerDeliveredSeq *int64   `json:"peer_delivered_seq,omitempty"`
	UpdatedAt        int64    `json:"updated_at"`
	// RetentionSeconds is how long the conversation's messages are kept, in seconds: the
	// group's own retention when its owner set one, else the operator's; 0 keeps them for
	// ever (a Parley extension; docs/protocol.md, "Expired messages").
	RetentionSeconds int64 `json:"retention_seconds"`
	// Removed is true only in the brief a user gets on leaving or being removed (the
	// conv_updated event and the answer to their own leave): the conversation is no longer
	// theirs, so clients drop it. Absent everywhere else.
	Removed bool `json:"removed,omitempty"`
	// OnlineCount is, in a read-fanout group only, about how many of its members are online
	// or away on any node, counted at most every 10 s (a large group sends no per-member
	// presence; docs/protocol.md 9.11). Absent in write-fanout conversations, whose members'
	// presence is subscribed to one by one.
	OnlineCount *int `json:"online_count,omitempty"`
}

// SyncEvent is one entry of a user's event log. Data depends on Type (section 8).
type SyncEvent struct {
	Cursor int64           `json:"cursor"`
	Type   string          `json:"type"`
	ConvID string          `json:"conv_id"`
	TS     int64           `json:"ts"`
	Data   json.RawMessage `json:"data"`
}

// ReadData is the data of a "read" event.
type ReadData struct {
	UserID  string `json:"user_id"`
	ReadSeq int64  `json:"read_seq"`
}

// DeliveredData is the data of a "delivered" event.
type DeliveredData struct {
	UserID       string `json:"user_id"`
	DeliveredSeq int64  `json:"delivered_seq"`
}

// RecallData is the data of a "recall" event.
type RecallData struct {
	Seq      int64  `json:"seq"`
	MsgID    string `json:"msg_id"`
	SenderID string `json:"sender_id"`
}

// ConvDeletedData is the data of a "conv_deleted" event.
type ConvDeletedData struct {
	ClearedSeq int64 `json:"cleared_seq"`
}

// SyncSnapshot is what a new device starts from, one page at a time: while HasMore is true,
// Next is the after= of the following page. Every page carries the same Cursor, the one to
// sync from once all pages are assembled (section 8.2).
type SyncSnapshot struct {
	Cursor        int64                       `json:"cursor"`
	Mark          int64                       `json:"mark"` // the sync mark at the snapshot's cut (section 10)
	Conversations []ConversationBrief         `json:"conversations"`
	Messages      map[string][]Message        `json:"messages"`
	ReadPositions map[string]map[string]int64 `json:"read_positions"`
	HasMore       bool                        `json:"has_more"`
	Next          string                      `json:"next"`
}

// SyncResponse answers a cursor sync.
type SyncResponse struct {
	Cursor  int64       `json:"cursor"`
	Events  []SyncEvent `json:"events"`
	HasMore bool        `json:"has_more"`
	// Mark is the position among read-fanout changes (section 10), to send with the next
	// sync; Conversations are the caller's read-fanout conversations with a message since
	// the mark given, as briefs (absent when none).
	Mark          int64               `json:"mark"`
	Conversations []ConversationBrief `json:"conversations,omitempty"`
}

// UnreadTotal answers GET /v1/unread: the caller's unread messages over all the
// conversations in their list (section 5), and how many of those conversations have any.
type UnreadTotal struct {
	Unread        int64 `json:"unread"`
	Conversations int   `json:"conversations"`
}

// Receipts answers GET /v1/conversations/{id}/receipts.
type Receipts struct {
	Seq            int64 `json:"seq"`
	MemberCount    int   `json:"member_count"`
	ReadCount      int   `json:"read_count"`
	DeliveredCount int   `json:"delivered_count"`
	// Readers is present (possibly empty) for direct conversations and read_detail groups.
	Readers *[]string `json:"readers,omitempty"`
}

// OpReceipts is the op of a ReceiptsPush.
const OpReceipts = "receipts"

// ReceiptsPush is the WebSocket push of a group's read counts to a message's sender
// (docs/protocol.md section 7.2): {"op":"receipts","conv_id",...,"receipts":[...]}, with an
// entry, as GET receipts answers it without readers, for each of the sender's newest
// messages whose counts changed since the previous push (at most MaxReceiptsPushed), at
// most one push per conversation per second.
type ReceiptsPush struct {
	Op       string     `json:"op"`
	ConvID   string     `json:"conv_id"`
	Receipts []Receipts `json:"receipts"`
}

// MaxReceiptsPushed is the most entries a ReceiptsPush carries: the sender's newest messages.
const MaxReceiptsPushed = 20

// MessagesPage answers GET /v1/conversations/{id}/messages.
//
// AnchorSeq, HasMoreBefore and HasMoreAfter answer only a jump to a date (around_ts), which
// pages both ways from the page it returns; a plain history call pages one way and leaves
// them out, so its encoding is what it was before jumps existed. In a jump's answer an
// absent field is its zero: anchor_seq 0 means no visible message is at or after the time.
type MessagesPage struct {
	Messages      []Message `json:"messages"`
	HasMore       bool      `json:"has_more"`
	AnchorSeq     int64     `json:"anchor_seq,omitempty"`
	HasMoreBefore bool      `json:"has_more_before,omitempty"`
	HasMoreAfter  bool      `json:"has_more_after,omitempty"`
	// ExpiredBeforeSeq is set on a page that reaches down to messages the retention
	// deleted: every message below it that the member could have seen is gone, and it is
	// the lowest seq still kept (max_seq+1 when none is). Omitted when nothing the member
	// could see has expired, or the page does not reach that far (docs/protocol.md).
	ExpiredBeforeSeq int64 `json:"expired_before_seq,omitempty"`
}

// ConversationList answers GET /v1/conversations: one page, most recently active first.
// While HasMore is true, Next is the after= of the following page; it is "" otherwise.
type ConversationList struct {
	Conversations []ConversationBrief `json:"conversations"`
	HasMore       bool                `json:"has_more"`
	Next          string              `json:"next"`
}

// Member roles in a MembersPage.
const (
	RoleOwner  = "owner"
	RoleMember = "member"
)

// Member is one member of a conversation, as GET /v1/conversations/{id}/members lists it.
type Member struct {
	UserID   string `json:"user_id"`
	Name     string `json:"name"`
	JoinedAt int64  `json:"joined_at"`
	Role     string `json:"role"`
}

// MembersPage answers GET /v1/conversations/{id}/members: members in order of standing
// (longest-standing first). While HasMore is true, Next is the after= of the following page.
type MembersPage struct {
	Members []Member `json:"members"`
	HasMore bool     `json:"has_more"`
	Next    string   `json:"next"`
}

// Me answers GET /v1/me: who the caller's token speaks for.
type Me struct {
	UserID   string `json:"user_id"`
	DeviceID string `json:"device_id"`
	Name     string `json:"name"`
	// Presence is the caller's presence setting: PresenceVisible, or PresenceHidden when
	// they hide their presence from everyone (PATCH /v1/me; docs/protocol.md 9.11).
	Presence string `json:"presence"`
}

// User is an operator-created account.
type User struct {
	UserID string `json:"user_id"`
	Name   string `json:"name"`
}

// Token answers POST /v1/admin/tokens.
type Token struct {
	Token     string `json:"token"`
	ExpiresAt int64  `json:"expires_at"`
}

// ErrorBody is every error answer: Code equals the HTTP status.
type ErrorBody struct {
	Code  int    `json:"code"`
	Error string `json:"error"`
}

// ReadPosition answers a read update.
type ReadPosition struct {
	ReadSeq int64 `json:"read_seq"`
}

// DeliveredPosition answers a delivered update.
type DeliveredPosition struct {
	DeliveredSeq int64 `json:"delivered_seq"`
}

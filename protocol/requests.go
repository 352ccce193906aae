package protocol

import "encoding/json"

// CreateUserRequest is the body of POST /v1/admin/users.
type CreateUserRequest struct {
	UserID string `json:"user_id"`
	Name   string `json:"name"`
}

// TokenRequest is the body of POST /v1/admin/tokens.
type TokenRequest struct {
	UserID     string `json:"user_id"`
	DeviceID   string `json:"device_id"`
	TTLSeconds int64  `json:"ttl_seconds"`
}

// CreateConversationRequest is the body of POST /v1/conversations.
type CreateConversationRequest struct {
	Type       string   `json:"type"`
	PeerID     string   `json:"peer_id"`
	Name       string   `json:"name"`
	Members    []string `json:"members"`
	ReadDetail bool     `json:"read_detail"`
}

// MembersRequest is the body of POST /v1/conversations/{id}/members.
type MembersRequest struct {
	Add    []string `json:"add"`
	Remove []string `json:"remove"`
}

// RenameRequest is the body of PATCH /v1/conversations/{id} (a Parley extension): a
// group's new name, its own retention, or both; at least one.
type RenameRequest struct {
	Name *string `json:"name,omitempty"`
	// RetentionSeconds is the group's own retention in seconds, within the server's
	// bounds; 0 clears it (the server's retention applies again).
	RetentionSeconds *int64 `json:"retention_seconds,omitempty"`
}

// MaxRetentionSeconds is the longest retention_seconds accepted: about 292 years, the
// longest a time.Duration holds.
const MaxRetentionSeconds = int64(1<<63-1) / 1e9

// SendRequest is the body of POST /v1/messages and the params of the "send" op.
type SendRequest struct {
	ConvID      string            `json:"conv_id"`
	ClientMsgID string            `json:"client_msg_id"`
	ContentType int               `json:"content_type"`
	Content     json.RawMessage   `json:"content"`
	Extra       map[string]string `json:"extra,omitempty"`
	// Mentions are the user ids the message mentions: at most MaxMentions, repeats removed.
	// In a read-fanout conversation each mentioned member gets the message in their log
	// (section 10); naming a non-member or oneself is stored and does nothing else.
	Mentions []string `json:"mentions,omitempty" maxlen:"50"`
}

// PositionRequest is the body of the read and delivered calls. Seq is a pointer so that a
// missing field is told apart from 0.
type PositionRequest struct {
	ConvID string `json:"conv_id,omitempty"`
	Seq    *int64 `json:"seq"`
}

// RecallRequest is the body of POST /v1/messages/recall and the params of the "recall" op.
type RecallRequest struct {
	ConvID string `json:"conv_id"`
	Seq    *int64 `json:"seq"`
}

// WebSocket operations (section 9).
const (
	OpSend      = "send"
	OpRead      = "read"
	OpDelivered = "delivered"
	OpRecall    = "recall"
	OpSync      = "sync"
	OpPing      = "ping"
	OpPong      = "pong"
	OpEvent     = "event"
	OpError     = "error"
	// Large groups (section 10): a connection opens the conversations it shows, and gets
	// their messages pushed in full ("message"); of the others it gets notices ("notice");
	// with ?mark= it gets one "changes" push after its catch-up.
	OpOpen    = "open"
	OpClose   = "close"
	OpMessage = "message"
	OpNotice  = "notice"
	OpChanges = "changes"
)

// ConvRequest is the params of the "open" and "close" ops.
type ConvRequest struct {
	ConvID string `json:"conv_id"`
}

// MessagePush is the push of a message of a read-fanout conversation the connection has
// open: it is in no log, so it has no cursor.
type MessagePush struct {
	Op      string  `json:"op"` // "message"
	Message Message `json:"message"`
}

// NoticePush tells a connection that a read-fanout conversation it does not have open has
// new messages, at most once per conversation per second, never with their content. A
// client that wants them waits PullDelayMS (random, so that the members of a large group do
// not all pull at once), then fetches history after the last seq it has.
type NoticePush struct {
	Op          string `json:"op"` // "notice"
	ConvID      string `json:"conv_id"`
	MaxSeq      int64  `json:"max_seq"`
	Unread      int64  `json:"unread"`
	PullDelayMS int64  `json:"pull_delay_ms"`
}

// ChangesPush is pushed once after the catch-up of a connection made with ?mark=: the
// briefs of the caller's read-fanout conversations with a message after that mark, and the
// mark to connect with next time, as a sync answers them.
type ChangesPush struct {
	Op            string              `json:"op"` // "changes"
	Mark          int64               `json:"mark"`
	Conversations []ConversationBrief `json:"conversations"`
}

// Frame is the envelope of a client frame: id and op, with the op's params flat beside them.
type Frame struct {
	ID string `json:"id"`
	Op string `json:"op"`
}

// SyncParams are the params of the "sync" op.
type SyncParams struct {
	Cursor *int64 `json:"cursor"`
	Mark   int64  `json:"mark"` // the mark of the last sync (section 10); 0 asks for every read-fanout conversation that has a message
	Limit  int    `json:"limit"`
}

// PushFrame is a server push: an event, or an error that precedes a close.
type PushFrame struct {
	Op    string     `json:"op"`
	Event *SyncEvent `json:"event,omitempty"`
	Code  int        `json:"code,omitempty"`
	Error string     `json:"error,omitempty"`
}

// ReplyFrame is the server's answer to a client frame. Result fields are spliced in flat.
type ReplyFrame struct {
	ID         string `json:"id"`
	Code       int    `json:"code"`
	Op         string `json:"op,omitempty"`
	Error      string `json:"error,omitempty"`
	RetryAfter int    `json:"retry_after,omitempty"`
}

// Presence (section 9.11): a connection subscribes to the presence of up to
// MaxPresenceSubscriptions users ("presence_subscribe", "presence_unsubscribe"), is answered
// their current presence, then pushed their changes ("presence"); a device says it is away
// or active ("presence_set").
const (
	OpPresenceSubscribe   = "presence_subscribe"
	OpPresenceUnsubscribe = "presence_unsubscribe"
	OpPresenceSet         = "presence_set"
	OpPresence            = "presence"
)

// MaxPresenceSubscriptions is how many users one connection may follow the presence of.
const MaxPresenceSubscriptions = 500

// The presence states, and the device states of "presence_set".
const (
	PresenceOnline  = "online"
	PresenceAway    = "away"
	PresenceOffline = "offline"
	PresenceActive  = "active"
	PresenceHidden  = "hidden"
	PresenceVisible = "visible"
)

// PresenceSubscribeRequest is the params of "presence_subscribe" and
// "presence_unsubscribe": Replace (subscribe only) replaces the connection's set instead
// of adding to it.
type PresenceSubscribeRequest struct {
	Users   []string `json:"users"`
	Replace bool     `json:"replace,omitempty"`
}

// PresenceSetRequest is the params of "presence_set": State is "away" or "active".
type PresenceSetRequest struct {
	State string `json:"state"`
}

// Presence is one user's presence: LastActiveAt (RFC 3339, to the minute) only when
// offline or away and known.
type Presence struct {
	UserID       string `json:"user_id"`
	State        string `json:"state"`
	LastActiveAt string `json:"last_active_at,omitempty"`
}

// PresenceList is the answer of GET /v1/presence and of "presence_subscribe".
type PresenceList struct {
	Presence []Presence `json:"presence"`
}

// PresencePush is the push of presence changes: at most one a second per connection.
type PresencePush struct {
	Op       string     `json:"op"`
	Presence []Presence `json:"presence"`
}

// MeUpdate is the body of PATCH /v1/me.
type MeUpdate struct {
	Presence *string `json:"presence,omitempty"`
}

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

// RenameRequest is the body of PATCH /v1/conversations/{id} (a Parley extension).
type RenameRequest struct {
	Name *string `json:"name"`
}

// SendRequest is the body of POST /v1/messages and the params of the "send" op.
type SendRequest struct {
	ConvID      string            `json:"conv_id"`
	ClientMsgID string            `json:"client_msg_id"`
	ContentType int               `json:"content_type"`
	Content     json.RawMessage   `json:"content"`
	Extra       map[string]string `json:"extra,omitempty"`
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
)

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

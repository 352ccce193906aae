package protocol

// Typing indicators (docs/protocol.md section 9.10): a connection tells the members of a
// conversation that its user started or stopped typing. Nothing of it is stored; a
// "started" holds for TypingExpiresMS unless refreshed.

// OpTyping is the op of a TypingRequest and of a TypingPush.
const OpTyping = "typing"

// The states of a TypingRequest and a TypingPush.
const (
	TypingStarted = "started"
	TypingStopped = "stopped"
)

// Typing limits.
const (
	// TypingExpiresMS is how long a "started" holds without a refresh: clients and the
	// server treat the typer as stopped after it.
	TypingExpiresMS = 6000
	// TypingEveryMS is the least time between two "started" of one device in one
	// conversation that the server forwards; a client typing on refreshes once per it.
	TypingEveryMS = 3000
	// MaxTypersNamed is the most typers a read-fanout TypingPush names.
	MaxTypersNamed = 5
	// TypingPushEveryMS is the least time between two TypingPush of one read-fanout
	// conversation to one connection.
	TypingPushEveryMS = 1000
)

// TypingRequest is the params of the "typing" op.
type TypingRequest struct {
	ConvID string `json:"conv_id"`
	State  string `json:"state"` // TypingStarted or TypingStopped
}

// TypingResult answers a "typing" op: Forwarded is false when the server dropped it
// silently (a "started" within TypingEveryMS of the last one forwarded, or a "stopped"
// with no "started" before it).
type TypingResult struct {
	Forwarded bool `json:"forwarded"`
}

// TypingPush is the push of a typing change to the other members' connections.
//
// In a write-fanout conversation it is one member's change: UserID's State, and for
// "started" ExpiresInMS (TypingExpiresMS), after which the client hides it unless a newer
// push of UserID came. In a read-fanout conversation it goes to the connections that have
// the conversation open, at most once per TypingPushEveryMS, and carries the whole set:
// Typers names up to MaxTypersNamed of those typing (the earliest to start first), Count
// says how many type in all (more than len(Typers): "several people are typing"), and
// UserID and State are the newest change it includes; ExpiresInMS is then how long the
// set holds if no push follows (the server sends the set again when a typer expires).
type TypingPush struct {
	Op          string   `json:"op"` // "typing"
	ConvID      string   `json:"conv_id"`
	UserID      string   `json:"user_id"`
	State       string   `json:"state"`
	ExpiresInMS int64    `json:"expires_in_ms"`
	Typers      []string `json:"typers,omitzero"` // read-fanout only (possibly empty)
	Count       *int     `json:"count,omitempty"` // read-fanout only
}

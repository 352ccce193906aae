package chat

import (
	"context"
	"fmt"
	"time"

	"github.com/parleychat/parley/internal/protocol"
)

// This file lists the Service's operations. Every method validates its input (ErrInvalid),
// checks that the caller may act (ErrForbidden / ErrNotFound) and returns errors wrapping
// exactly one sentinel of errors.go.

var errTODO = fmt.Errorf("%w: not implemented yet", ErrUnavailable)

// CreateUser creates a user; created is false (and the existing user returned) if it exists.
func (s *Service) CreateUser(ctx context.Context, userID, name string) (u protocol.User, created bool, err error) {
	return u, false, errTODO
}

// IssueToken mints a token for (userID, deviceID). ttl 0 means the default. ErrNotFound for
// an unknown user.
func (s *Service) IssueToken(ctx context.Context, userID, deviceID string, ttl time.Duration) (protocol.Token, error) {
	return protocol.Token{}, errTODO
}

// Authenticate verifies a user token: ErrUnauthorized when missing, malformed, forged,
// expired or revoked.
func (s *Service) Authenticate(ctx context.Context, token string) (Identity, error) {
	return Identity{}, errTODO
}

// RevokeTokens invalidates every token of userID issued so far and ends the user's hub
// subscriptions (the gateway closes their connections). ErrNotFound for an unknown user.
func (s *Service) RevokeTokens(ctx context.Context, userID string) error { return errTODO }

// CreateConversation creates a direct or group conversation (section 5).
func (s *Service) CreateConversation(ctx context.Context, me Identity, req protocol.CreateConversationRequest) (protocol.ConversationBrief, error) {
	return protocol.ConversationBrief{}, errTODO
}

// UpdateMembers adds and removes group members.
func (s *Service) UpdateMembers(ctx context.Context, me Identity, convID string, req protocol.MembersRequest) (protocol.ConversationBrief, error) {
	return protocol.ConversationBrief{}, errTODO
}

// Rename sets a group's name (owner only).
func (s *Service) Rename(ctx context.Context, me Identity, convID, name string) (protocol.ConversationBrief, error) {
	return protocol.ConversationBrief{}, errTODO
}

// ListConversations returns the caller's visible conversations, most recently active first.
func (s *Service) ListConversations(ctx context.Context, me Identity) ([]protocol.ConversationBrief, error) {
	return nil, errTODO
}

// GetConversation returns one conversation as the caller sees it.
func (s *Service) GetConversation(ctx context.Context, me Identity, convID string) (protocol.ConversationBrief, error) {
	return protocol.ConversationBrief{}, errTODO
}

// DeleteConversation hides the conversation for the caller and clears their history.
func (s *Service) DeleteConversation(ctx context.Context, me Identity, convID string) error {
	return errTODO
}

// Send stores a message durably with its events and returns the ack; a repeated
// (sender, client_msg_id) returns the original ack with Duplicate set.
func (s *Service) Send(ctx context.Context, me Identity, req protocol.SendRequest) (protocol.MessageAck, error) {
	return protocol.MessageAck{}, errTODO
}

// HistoryQuery selects a page of messages. BeforeSeq > 0 selects the page below it.
type HistoryQuery struct {
	AfterSeq  int64
	BeforeSeq int64
	Limit     int // 0 means the default; clamped to the maximum
}

// History returns visible messages of a conversation.
func (s *Service) History(ctx context.Context, me Identity, convID string, q HistoryQuery) (protocol.MessagesPage, error) {
	return protocol.MessagesPage{}, errTODO
}

// Recall recalls the caller's own message within the recall window.
func (s *Service) Recall(ctx context.Context, me Identity, convID string, seq int64) error {
	return errTODO
}

// MarkRead advances the caller's read position; it returns the current position.
func (s *Service) MarkRead(ctx context.Context, me Identity, convID string, seq int64) (int64, error) {
	return 0, errTODO
}

// MarkDelivered advances the caller's delivered position; it returns the current position.
func (s *Service) MarkDelivered(ctx context.Context, me Identity, convID string, seq int64) (int64, error) {
	return 0, errTODO
}

// Receipts counts the members other than the sender of message seq who read / received it.
func (s *Service) Receipts(ctx context.Context, me Identity, convID string, seq int64) (protocol.Receipts, error) {
	return protocol.Receipts{}, errTODO
}

// Snapshot returns the state a new device starts from, read from one consistent cut.
// recent < 0 means the default.
func (s *Service) Snapshot(ctx context.Context, me Identity, recent int) (protocol.SyncSnapshot, error) {
	return protocol.SyncSnapshot{}, errTODO
}

// Sync returns events after cursor (at most limit; 0 means the default). When there are
// none and wait > 0 it waits up to min(wait, 30 s) for one to commit; if ctx ends while
// waiting it returns the empty response, not an error. ErrGone when cursor is older than
// the retained log, ErrConflict when it is ahead of the latest.
func (s *Service) Sync(ctx context.Context, me Identity, cursor int64, limit int, wait time.Duration) (protocol.SyncResponse, error) {
	return protocol.SyncResponse{}, errTODO
}

// LatestCursor returns the user's highest committed cursor.
func (s *Service) LatestCursor(ctx context.Context, userID string) (int64, error) {
	return 0, errTODO
}

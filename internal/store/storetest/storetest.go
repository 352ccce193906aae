// Package storetest is the conformance suite of the store contract. Every backend runs
// Run and Bench unchanged from its own tests, so the backends cannot drift apart: a
// behaviour the chat layer relies on is either asserted here or not relied on.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Harness{Open: func(t testing.TB, c storetest.Config) store.Store {
//			return openTestStore(t, c.Dir)
//		}})
//	}
package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/parleychat/parley/internal/store"
)

// Run runs the conformance suite against the backend h opens. Subtests run in parallel,
// each on stores of its own.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"Users/CreateAndLookup", testUserCreateAndLookup},
		{"Users/Exists", testUserExists},
		{"Users/NotFound", testUserNotFound},
		{"Users/SetTokenGen", testUserSetTokenGen},
		{"Users/SetPresenceHidden", testUserSetPresenceHidden},
		{"Conversations/CreateAndLookup", testConversationCreateAndLookup},
		{"Conversations/ExistsAndNotFound", testConversationExistsAndNotFound},
		{"Conversations/Update", testConversationUpdate},
		{"Members/PutAndLookup", testMemberPutAndLookup},
		{"Members/OrderedByOrdinal", testMembersOrdered},
		{"Members/Memberships", testMemberships},
		{"Members/Delete", testMemberDelete},
		{"Members/Paged", testMembersPaged},
		{"Positions/OnlyAdvance", testPositionsOnlyAdvance},
		{"Positions/Concurrent", testPositionsConcurrent},
		{"Messages/InsertAndLookup", testMessageInsertAndLookup},
		{"Messages/Uniqueness", testMessageUniqueness},
		{"Messages/Ranges", testMessageRanges},
		{"Messages/Recall", testMessageRecall},
		{"Messages/Mentions", testMessageMentions},
		{"Append/Assigns", testAppendAssigns},
		{"Append/Duplicate", testAppendDuplicate},
		{"Append/NotMember", testAppendNotMember},
		{"Append/FollowsUpdates", testAppendFollowsUpdates},
		{"Append/Concurrent", testAppendConcurrent},
		{"Append/StartedInOrder", testAppendStartedInOrder},
		{"Append/MentionsWriteFanout", testAppendMentionsWriteFanout},
		{"Append/MentionsConcurrent", testAppendMentionsConcurrent},
		{"Events/AppendGapless", testEventAppendGapless},
		{"Events/AppendUnknownUser", testEventAppendUnknownUser},
		{"Events/Read", testEventsRead},
		{"Events/MessagePayload", testEventsMessagePayload},
		{"Events/InterleavedMessages", testEventsInterleavedMessages},
		{"Events/Cursors", testEventCursors},
		{"Events/Prune", testEventPrune},
		{"Events/PruneBesideAppends", testPruneBesideAppends},
		{"Update/ErrorLeavesNothing", testUpdateErrorLeavesNothing},
		{"Update/PanicReachesCaller", testUpdatePanicReachesCaller},
		{"Update/ExistsDoesNotAbort", testUpdateExistsDoesNotAbort},
		{"Update/SeesEarlierUpdates", testUpdateSeesEarlier},
		{"Update/ConcurrentFailuresIsolated", testUpdateConcurrentFailures},
		{"View/Snapshot", testViewSnapshot},
		{"View/SeesReturnedUpdate", testViewSeesReturnedUpdate},
		{"Close", testClose},
	}
	tests = append(tests, pushTests()...)
	tests = append(tests, busKeyTests()...)
	tests = append(tests, attachmentTests()...)
	tests = append(tests, tierTests()...)
	tests = append(tests, expireTests()...)
	tests = append(tests, messageAtTests()...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h.fresh(t))
		})
	}
	for _, tc := range harnessTests() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
}

// errTest is returned by fns that must fail.
var errTest = errors.New("storetest: fn failed on purpose")

// update runs fn in an Update and fails the test on error.
func update(t testing.TB, s store.Store, fn func(ctx context.Context, tx store.Tx) error) {
	t.Helper()
	ctx := t.Context()
	if err := s.Update(ctx, func(tx store.Tx) error { return fn(ctx, tx) }); err != nil {
		t.Fatalf("Update: %v", err)
	}
}

// view runs fn in a View and fails the test on error.
func view(t testing.TB, s store.Store, fn func(ctx context.Context, tx store.ReadTx) error) {
	t.Helper()
	ctx := t.Context()
	if err := s.View(ctx, func(tx store.ReadTx) error { return fn(ctx, tx) }); err != nil {
		t.Fatalf("View: %v", err)
	}
}

// wantErr fails the test unless errors.Is(err, want).
func wantErr(t testing.TB, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: error %v, want %v", what, err, want)
	}
}

// newUser returns a user fixture.
func newUser(id string) store.User {
	return store.User{ID: id, Name: "name of " + id, TokenGen: 1, CreatedAt: 1_700_000_000_000}
}

// newConversation returns a conversation fixture.
func newConversation(id string) store.Conversation {
	return store.Conversation{
		ID: id, Type: "group", Name: "conv " + id, OwnerID: "alice", MembersCount: 2,
		CreatedAt: 1_700_000_000_001, UpdatedAt: 1_700_000_000_002,
	}
}

// newMessage returns a message fixture with content and extra.
func newMessage(convID string, seq int64, sender string) store.Message {
	return store.Message{
		ConvID: convID, Seq: seq, SenderID: sender,
		MsgID:       fmt.Sprintf("msg-%s-%d", convID, seq),
		ClientMsgID: fmt.Sprintf("cli-%s-%d", convID, seq),
		ContentType: 1,
		Content:     fmt.Appendf(nil, `{"text":"message %d"}`, seq),
		Extra:       []byte(`{"k":"v"}`),
		CreatedAt:   1_700_000_001_000 + seq,
	}
}

// createUsers stores a user fixture for each id.
func createUsers(t testing.TB, s store.Store, ids ...string) {
	t.Helper()
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for _, id := range ids {
			if err := tx.CreateUser(ctx, newUser(id)); err != nil {
				return err
			}
		}
		return nil
	})
}

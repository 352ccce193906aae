package storetest

import (
	"testing"
	"time"

	"github.com/parleychat/parley/internal/store"
)

// Harness tells the suite how to open the backend under test.
type Harness struct {
	// Open opens the store kept at c.Dir, creating it empty when there is none, and closes
	// it at t's cleanup (ignoring the error of closing a store the suite has already
	// closed). The suite passes a fresh t.TempDir() for each new store, and passes the
	// same Dir again, after closing the store, to check what survives a reopen. A backend
	// that keeps its state elsewhere (a database server) derives its isolated state from
	// Dir, for example a schema named after it.
	Open func(t testing.TB, c Config) store.Store
	// Queued reports how many Update calls wait for the writer of s (a store Open
	// returned) and have not yet been taken into a batch. A backend that group-commits,
	// running the Updates queued behind its one writer in one underlying transaction, sets
	// it, and the suite then checks that Updates sharing a commit stay isolated and that
	// the backend honours Config.MaxBatch and Config.OnCommit. Left nil, the GroupCommit
	// tests are skipped.
	Queued func(s store.Store) int
	// LosesUpdatesOnKill says that the stores Open returns may lose Updates that returned
	// when the process is killed (a mode that does not hand each commit to the operating
	// system before returning); the suite's crash test is then skipped.
	LosesUpdatesOnKill bool
}

// Config is what the suite asks of a store it opens.
type Config struct {
	// Dir is where the store keeps its state.
	Dir string
	// MaxBatch caps how many Update calls a group-committing backend commits at once; 0
	// selects the backend's default. A backend without group commit ignores it.
	MaxBatch int
	// OnCommit, if not nil, is called by a group-committing backend after each committed
	// batch with the number of Update calls it carried and how long it took. A backend
	// without group commit ignores it.
	OnCommit func(batch int, d time.Duration)
}

// fresh opens a new, empty store that no other test shares.
func (h Harness) fresh(t testing.TB) store.Store {
	t.Helper()
	return h.Open(t, Config{Dir: t.TempDir()})
}

// harnessTests are the suite's tests that open stores themselves: to reopen one, to
// configure its group commit, or just to run on a fresh one (those added after Run's
// list, kept in their own files).
func harnessTests() []struct {
	name string
	fn   func(t *testing.T, h Harness)
} {
	return []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"Lifecycle/ReopenKeepsEverything", testReopenKeepsEverything},
		{"Lifecycle/KeptTxIsRefused", testKeptTxIsRefused},
		{"Lifecycle/AppendAfterReopen", testAppendAfterReopen},
		{"Conversations/RetentionAfterReopen", testConversationRetention},
		{"Append/RowsAfterSends", testAppendRowsAfterSends},
		{"Append/ReadFanout", testAppendReadFanout},
		{"Append/ReadFanoutMarks", testReadFanoutMarks},
		{"Append/MentionsReadFanout", testAppendMentionsReadFanout},
		{"Lifecycle/DurableAcrossKill", testDurableAcrossKill},
		{"GroupCommit/FailedUpdateUndoneAlone", testFailedUpdateUndoneAlone},
		{"GroupCommit/QueuedUpdatesShareACommit", testQueuedUpdatesShareACommit},
		{"GroupCommit/MaxBatchCapsBatches", testMaxBatchCapsBatches},
		{"GroupCommit/UnderLoad", testGroupCommitUnderLoad},
		{"GroupCommit/CloseDrainsQueuedUpdates", testCloseDrainsQueuedUpdates},
		{"Concurrency/EventsOneUser", testConcurrentEventsOneUser},
		{"Concurrency/MessagesOneConversation", testConcurrentMessagesOneConversation},
		{"Push/ReopenKeeps", testPushReopenKeeps},
	}
}

package sqlite

import (
	"testing"

	"github.com/parleychat/parley/internal/chat/chattest"
	"github.com/parleychat/parley/internal/store"
)

// BenchmarkSync measures a reconnecting device's catch-up read on this backend; see
// chattest.BenchSync.
func BenchmarkSync(b *testing.B) {
	chattest.BenchSync(b, func(b *testing.B) store.Store { return openTest(b, Options{}) })
}

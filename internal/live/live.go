// Package live is Parley's live delivery: what a node keeps in memory to push committed
// state to the connections open now, fast, without changing any rule of chat. It holds the
// recent-messages window of large groups (Recent), the read counts of groups (ReadCounts)
// and the encoder of messages (AppendMessageJSON). Everything it holds is rebuilt from the
// store, which stays the authority: chat decides what is sent and stored, and calls into
// live after the commit. It never imports chat.
package live

import "strings"

// IsGroupID reports whether convID names a group: direct conversations ("d_") show their
// peer's positions instead and get no count pushes.
func IsGroupID(convID string) bool { return strings.HasPrefix(convID, "g_") }

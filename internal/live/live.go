// Package live is Parley's live delivery: what a node keeps in memory to push committed
// state to the connections open now, fast, without changing any rule of chat. It holds the
// link to the other nodes through a bus (Cluster), the read counts of groups (ReadCounts)
// and their pushes to senders (ReceiptPushes), the recent-messages window of large groups
// (Recent) and the encoder of messages (AppendMessageJSON). Everything it holds is rebuilt
// from the store, which stays the authority: chat decides what is sent and stored, and
// calls into live after the commit. It never imports chat: what it needs of chat's rules
// comes through small role interfaces chat provides (Conversations, Changes, Revocations,
// ReceiptCounter).
package live

import "strings"

// IsGroupID reports whether convID names a group: direct conversations ("d_") show their
// peer's positions instead and get no count pushes.
func IsGroupID(convID string) bool { return strings.HasPrefix(convID, "g_") }

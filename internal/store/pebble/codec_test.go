package pebble

import (
	"testing"

	"github.com/parleychat/parley/internal/store"
)

// TestConversationRecordCompatible: a conversation record written before groups had their
// own retention (the bytes of one without it, which this version writes alike) decodes
// with RetentionMS 0, and one with it round-trips, with and without read fanout.
func TestConversationRecordCompatible(t *testing.T) {
	base := store.Conversation{ID: "c1", Type: "group", Name: "n", OwnerID: "alice", MaxSeq: 9,
		MembersCount: 3, CreatedAt: 1, UpdatedAt: 2}
	old := encodeConversation(nil, base) // no retention: the earlier versions' bytes
	big := base
	big.ReadFrom, big.Mark = 4, 5
	oldBig := encodeConversation(nil, big)
	for _, tc := range []struct {
		name string
		rec  []byte
		want store.Conversation
	}{
		{"earlier write fanout", old, base},
		{"earlier read fanout", oldBig, big},
		{"own retention", encodeConversation(nil, with(base, 3_600_000)), with(base, 3_600_000)},
		{"own retention, read fanout", encodeConversation(nil, with(big, 60_000)), with(big, 60_000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeConversation(tc.rec, "c1")
			if err != nil || got != tc.want {
				t.Errorf("decode = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func with(c store.Conversation, retentionMS int64) store.Conversation {
	c.RetentionMS = retentionMS
	return c
}

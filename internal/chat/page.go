package chat

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// PageQuery selects one page of a list that grows with a user's memberships: After is the
// "next" token of the previous page ("" for the first), Limit its size (0: the default).
type PageQuery struct {
	After string
	Limit int
}

// Page token kinds: a token is only accepted by the call that issued it.
const (
	tokenConversations = "c"
	tokenSnapshot      = "s"
	tokenMembers       = "m"
)

// pageKey is where a page ended. It travels to the client as an opaque token, so that the
// keyset (and the snapshot's cursor) can change without breaking the contract.
type pageKey struct {
	kind   string
	cursor int64  // snapshot: the cursor of its first page, to sync from afterwards
	mark   int64  // snapshot: the sync mark of its first page, likewise
	at     int64  // conversations: updated_at of the last one; members: its ordinal
	convID string // conversations: conv_id of the last one (ties on updated_at)
}

// encode returns the token of k: base64url of "kind:cursor:at:conv_id", and ":mark" when
// there is a mark (a token without one, as issued before marks existed, means mark 0).
func (k pageKey) encode() string {
	raw := fmt.Sprintf("%s:%d:%d:%s", k.kind, k.cursor, k.at, k.convID)
	if k.mark != 0 {
		raw += ":" + strconv.FormatInt(k.mark, 10)
	}
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// decodePageKey parses a token that a call of the given kind issued; anything else is
// ErrInvalid, since a client must only send back what it was given.
func decodePageKey(token, kind string) (pageKey, error) {
	bad := invalid("after is not a page token of this call: pass the \"next\" of the previous page")
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return pageKey{}, bad
	}
	parts := strings.Split(string(raw), ":") // conv_ids have no ':'
	if len(parts) != 4 && len(parts) != 5 || parts[0] != kind {
		return pageKey{}, bad
	}
	k := pageKey{kind: kind, convID: parts[3]}
	if len(parts) == 5 {
		if k.mark, err = strconv.ParseInt(parts[4], 10, 64); err != nil || k.mark <= 0 {
			return pageKey{}, bad
		}
	}
	k.cursor, err = strconv.ParseInt(parts[1], 10, 64)
	if err != nil || k.cursor < 0 {
		return pageKey{}, bad
	}
	k.at, err = strconv.ParseInt(parts[2], 10, 64)
	if err != nil || (k.convID != "" && !protocol.ValidConvID(k.convID)) {
		return pageKey{}, bad
	}
	return k, nil
}

// pageLimit applies the default and the maximum of list pages; a negative limit is invalid.
func pageLimit(limit int) (int, error) {
	switch {
	case limit < 0:
		return 0, invalid("limit must not be negative")
	case limit == 0:
		return protocol.DefaultListLimit, nil
	}
	return min(limit, protocol.MaxListLimit), nil
}

// byActivity is the order of conversation lists: most recently active first, ties by
// conv_id.
func byActivity(a, b store.Membership) int {
	if c := cmp.Compare(b.Conversation.UpdatedAt, a.Conversation.UpdatedAt); c != 0 {
		return c
	}
	return cmp.Compare(a.ConvID, b.ConvID)
}

// activityKey is the key of the conversation m that a page ended at; it keeps k's kind and
// cursor.
func activityKey(k pageKey, m store.Membership) pageKey {
	k.at, k.convID = m.Conversation.UpdatedAt, m.ConvID
	return k
}

// afterKey returns the memberships (sorted byActivity) that come after k, or all of them
// for the first page (k.convID == "").
func afterKey(ms []store.Membership, k pageKey) []store.Membership {
	if k.convID == "" {
		return ms
	}
	probe := store.Membership{Member: store.Member{ConvID: k.convID}, Conversation: store.Conversation{UpdatedAt: k.at}}
	i, found := slices.BinarySearchFunc(ms, probe, byActivity)
	if found {
		i++
	}
	return ms[i:]
}

// pageBytes is the soft byte budget of one page of conversations: a page ends after the
// conversation that reaches it. A count alone does not bound a page, since each brief carries
// a last message of up to 64 KiB and each snapshot conversation up to MaxRecent of them.
const pageBytes = 1 << 20

// Rough encoded sizes of the fixed parts, for the budget; content and extra count exactly.
const (
	briefOverhead   = 512
	messageOverhead = 256
)

// fillPage passes the memberships of rest, in order, to add until limit of them were added
// or the sizes add returned reach pageBytes. It returns the token of the next page, "" when
// rest is exhausted. k is the key the page started after (its kind and cursor carry over).
func fillPage(rest []store.Membership, k pageKey, limit int, add func(store.Membership) (int, error)) (string, error) {
	size := 0
	for i, m := range rest {
		if i == limit || size >= pageBytes {
			return activityKey(k, rest[i-1]).encode(), nil
		}
		n, err := add(m)
		if err != nil {
			return "", err
		}
		size += n
	}
	return "", nil
}

// messageBytes estimates the encoded size of m (nil: none).
func messageBytes(m *protocol.Message) int {
	if m == nil {
		return 0
	}
	n := messageOverhead + len(m.Content)
	for k, v := range m.Extra {
		n += len(k) + len(v)
	}
	return n
}

package chat

import (
	"errors"
	"testing"
)

// FuzzDecodePageKey: a page token comes from the client, so any string must either decode
// or be ErrInvalid, and whatever decodes must encode back to a token that decodes the same.
func FuzzDecodePageKey(f *testing.F) {
	for _, k := range []pageKey{
		{kind: tokenConversations, at: 1796135987935, convID: "g_zobyv5vtk4plq64ycka7aslhve"},
		{kind: tokenSnapshot, cursor: 3, at: -1, convID: "d_cqnezuscwz7if3puu6f3iggubi"},
		{kind: tokenMembers, at: 2},
	} {
		f.Add(k.encode(), k.kind)
	}
	f.Add("hello", tokenConversations)
	f.Add("", tokenSnapshot)
	f.Fuzz(func(t *testing.T, token, kind string) {
		k, err := decodePageKey(token, kind)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("decode %q: %v, want ErrInvalid", token, err)
			}
			return
		}
		again, err := decodePageKey(k.encode(), kind)
		if err != nil || again != k {
			t.Fatalf("round trip of %q: %+v then %+v, %v", token, k, again, err)
		}
	})
}

// TestDecodePageKeyRefusesOtherCalls: a token is accepted only by the call that issued it.
func TestDecodePageKeyRefusesOtherCalls(t *testing.T) {
	tok := pageKey{kind: tokenConversations, at: 5, convID: "g_x"}.encode()
	if _, err := decodePageKey(tok, tokenSnapshot); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a list token accepted by the snapshot: %v", err)
	}
	if _, err := decodePageKey(tok, tokenConversations); err != nil {
		t.Fatalf("a list token refused by the list: %v", err)
	}
}

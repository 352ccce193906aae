package client_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/internal/parleytest"
	"github.com/parleychat/parley/internal/server"
)

// TestMessagesAroundAgainstServer: the SDK's jump to a date lands where the server's clock
// put the messages (a day apart), and its page's has_more_before and has_more_after lead
// History back to the start and on to the end.
func TestMessagesAroundAgainstServer(t *testing.T) {
	day0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var now atomic.Int64
	now.Store(day0.UnixNano())
	s := parleytest.Start(t, func(c *server.Config) {
		c.Now = func() time.Time { return time.Unix(0, now.Load()) }
		c.Gateway.RequestRate, c.Gateway.SendRate = 0, 0
	})
	ctx := testCtx(t)
	alice := newTestClient(s, s.User(t, "alice"), nil)
	bob := newTestClient(s, s.User(t, "bob"), nil)
	conv, err := alice.CreateDirect(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	const n = 12
	for i := range n {
		now.Store(day0.AddDate(0, 0, i).UnixNano())
		if _, err := alice.Send(ctx, conv.ConvID, 1, map[string]string{"text": fmt.Sprint("day ", i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Midnight of day 5 (the 6th message's day): the first message at or after it is seq 6.
	page, err := bob.MessagesAround(ctx, conv.ConvID, time.Date(2026, 3, 6, 0, 0, 0, 0, time.UTC), 4)
	if err != nil {
		t.Fatal(err)
	}
	if got := pageSeqs(page); page.AnchorSeq != 6 || got != "[4 5 6 7]" || !page.HasMoreBefore || !page.HasMoreAfter {
		t.Fatalf("around day 5: %s anchor %d before %v after %v", got, page.AnchorSeq, page.HasMoreBefore, page.HasMoreAfter)
	}
	// Scroll both ways until the ends.
	seen := page.Messages
	for more := page.HasMoreBefore; more; {
		p, err := bob.History(ctx, conv.ConvID, client.HistoryQuery{BeforeSeq: seen[0].Seq, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		seen, more = append(p.Messages, seen...), p.HasMore
	}
	for more := page.HasMoreAfter; more; {
		p, err := bob.History(ctx, conv.ConvID, client.HistoryQuery{AfterSeq: seen[len(seen)-1].Seq, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		seen, more = append(seen, p.Messages...), p.HasMore
	}
	if len(seen) != n || seen[0].Seq != 1 || seen[n-1].Seq != n {
		t.Fatalf("scrolled to %d messages: %s", len(seen), pageSeqs(client.MessagesPage{Messages: seen}))
	}
	// After the last message: no anchor, the newest page.
	page, err = bob.MessagesAround(ctx, conv.ConvID, day0.AddDate(0, 0, n), 3)
	if err != nil || page.AnchorSeq != 0 || pageSeqs(page) != "[10 11 12]" || page.HasMoreAfter || !page.HasMoreBefore {
		t.Fatalf("after the end: %+v %v", page, err)
	}
	// Before 1970 is the start.
	page, err = bob.MessagesAround(ctx, conv.ConvID, time.Unix(-5, 0), 2)
	if err != nil || page.AnchorSeq != 1 || pageSeqs(page) != "[1 2]" {
		t.Fatalf("before the epoch: %+v %v", page, err)
	}
}

func pageSeqs(p client.MessagesPage) string {
	s := make([]int64, len(p.Messages))
	for i, m := range p.Messages {
		s[i] = m.Seq
	}
	return fmt.Sprint(s)
}

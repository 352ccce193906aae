package webtest

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/server"
)

// TestJumpToDate fills a direct chat over three days (the server's clock set back), then
// drives the date picker of alice's chat:
//
//   - a jump to a day shows the page around its first message, scrolled to it and
//     highlighted, without the newest messages; "Load earlier messages" pages down from it
//     and "Load later messages" fills the hole up to the newest ones, after which the chat
//     is live again;
//   - sending while jumped goes back to the newest messages; with every message loaded, a
//     jump only scrolls; a jump past the last message says so and shows the newest.
func TestJumpToDate(t *testing.T) {
	var fake atomic.Int64 // Unix ns the server's clock shows; 0: the real time
	n := startNode(t, func(cfg *server.Config) {
		cfg.Now = func() time.Time {
			if ns := fake.Load(); ns != 0 {
				return time.Unix(0, ns)
			}
			return time.Now()
		}
	})
	today := time.Now()
	day := func(ago int) time.Time {
		return time.Date(today.Year(), today.Month(), today.Day()-ago, 9, 0, 0, 0, time.Local)
	}
	// Day 12 ago: seqs 1-60; 6 ago: 61-120; 2 ago: 121-150 (the 30 the snapshot brings).
	days := []struct {
		at    time.Time
		count int
	}{{day(12), 60}, {day(6), 60}, {day(2), 30}}
	fake.Store(day(12).Add(-time.Hour).UnixNano())
	n.devLogin("alice", "setup")
	bob := n.devLogin("bob", "script")
	var conv struct {
		ConvID string `json:"conv_id"`
	}
	n.api.MustDo(t, "POST", "/v1/conversations", bob, map[string]string{"type": "direct", "peer_id": "alice"}, &conv)
	seq := 0
	say := func(text string) {
		seq++
		n.api.MustDo(t, "POST", "/v1/messages", bob, map[string]any{
			"conv_id": conv.ConvID, "client_msg_id": fmt.Sprintf("bob-%d", seq), "content_type": 1,
			"content": map[string]string{"text": text},
		}, nil)
	}
	for _, d := range days {
		for i := range d.count {
			fake.Store(d.at.Add(time.Duration(i) * time.Minute).UnixNano())
			say(fmt.Sprintf("message %d", seq+1))
		}
	}
	fake.Store(0)

	browser := newBrowser(t)
	alice := newPage(t, browser, "alice/laptop", true)
	alice.signIn(n.url(), "alice", "laptop")
	alice.open(conv.ConvID)
	alice.waitJS("the newest messages", `document.querySelector('#messages li.msg:last-child')?.dataset.seq === '150'`)

	shown := `[...document.querySelectorAll('#messages li.msg')].map(li => Number(li.dataset.seq))`
	seqsBetween := func(from, to int) string {
		return fmt.Sprintf(`((s) => s.length === %d && s.every((v, i) => v === %d + i))(%s)`, to-from+1, from, shown)
	}
	jumpTo := func(d time.Time) {
		// What the picker does when a day is chosen: the value, then a change event.
		alice.eval(fmt.Sprintf(
			`(() => { const i = document.getElementById('jump-date'); i.value = %q; i.dispatchEvent(new Event('change', {bubbles: true})); return true; })()`,
			d.Format(time.DateOnly)), nil)
	}
	anchorInView := func(seq int) string {
		return fmt.Sprintf(`(() => {
			const li = document.querySelector('#messages li.msg[data-seq="%d"]'), sc = document.getElementById('scroller');
			if (!li || document.getElementById('messages').dataset.anchor !== '%d') return false;
			const a = li.getBoundingClientRect(), b = sc.getBoundingClientRect();
			return a.top >= b.top && a.bottom <= b.bottom;
		})()`, seq, seq)
	}

	// The day 6 ago, from its midnight: its first message (61) is the anchor, 25 before it
	// and 25 from it on; the newest messages are not shown while a hole separates them.
	jumpTo(day(6))
	alice.waitJS("the page around message 61", seqsBetween(36, 85))
	alice.waitJS("message 61 in view", anchorInView(61))
	alice.waitJS("the anchor highlighted", `document.querySelector('#messages li.msg[data-seq="61"]').classList.contains('anchor')`)
	alice.waitJS("load later offered", `!document.getElementById('later').hidden && !document.getElementById('load-older').hidden`)
	alice.screenshot("jump-to-date")

	// A send while jumped goes back to the newest messages, and below them.
	alice.send("back to now")
	alice.waitState("back to now", "sent")
	alice.waitJS("the newest messages again", seqsBetween(121, 151))
	alice.waitJS("no hole left to load", `document.getElementById('later').hidden`)

	// The same day again. Up: older pages, down to the first message.
	jumpTo(day(6))
	alice.waitJS("the page around message 61 again", seqsBetween(36, 85))
	alice.click("load earlier", `#load-older`)
	alice.waitJS("messages from 1", seqsBetween(1, 85))
	alice.waitJS("nothing older", `document.getElementById('load-older').hidden`)

	// Down: one page (86-135) reaches the newest messages: the hole is gone, the chat live.
	alice.click("load later", `#load-newer`)
	alice.waitJS("every message", seqsBetween(1, 151))
	alice.waitJS("no more to load later", `document.getElementById('later').hidden`)
	say("live again")
	alice.waitJS("the live message", seqsBetween(1, 152)+` && `+messageWith("live again")+` !== undefined`)

	// With every message loaded, a jump only scrolls: to the first day's first message.
	jumpTo(day(12))
	alice.waitJS("message 1 in view", anchorInView(1))
	alice.waitJS("still every message", seqsBetween(1, 152))

	// A day after the last message: no anchor, the newest page, and a note saying so.
	jumpTo(today.AddDate(0, 0, 1))
	alice.waitJS("the note", `document.getElementById('jump-note').textContent.startsWith('No messages from')`)
	alice.waitJS("the newest message in view", anchorInView(152))
}

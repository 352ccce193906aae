package webtest

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestReconnect cuts the network (the server is stopped, then started again on the same port
// and data directory) while two users chat, over WebSocket and over forced HTTP long-poll:
//
//   - messages typed while the server is down wait in the outbox, shown as "sending";
//   - after the restart the pages reconnect with backoff, catch up from their saved cursor
//     (messages another client sent meanwhile appear), and re-send the outbox with the same
//     client_msg_id: every message is stored and shown exactly once, in seq order;
//   - a reload resumes from the cursor saved in localStorage, without a new snapshot.
func TestReconnect(t *testing.T) {
	for _, transport := range []string{"websocket", "longpoll"} {
		t.Run(transport, func(t *testing.T) { testReconnect(t, transport) })
	}
}

func testReconnect(t *testing.T, transport string) {
	n := startNode(t)
	browser := newBrowser(t)
	url := n.url() + "/?transport=" + transport + "&backoff=100,600"
	bobAPI := n.devLogin("bob", "script")

	alice := newPage(t, browser, "alice", true)
	alice.signIn(url, "alice", "laptop")
	bob := newPage(t, browser, "bob", true)
	bob.signIn(url, "bob", "laptop")
	for _, p := range []*page{alice, bob} {
		p.waitJS("transport "+transport, fmt.Sprintf(`document.getElementById('status').dataset.transport === %q`, transport))
	}

	conv := alice.newDirect("bob")
	alice.send("before the cut")
	bob.open(conv)
	alice.waitState("before the cut", "read")

	// Cut: the server drains and stops. Both pages notice and keep retrying.
	n.stop()
	for _, p := range []*page{alice, bob} {
		p.waitJS("the client to notice the cut", `document.getElementById('status').dataset.status !== 'online'`)
	}
	alice.send("sent while offline 1")
	alice.send("sent while offline 2")
	alice.waitState("sent while offline 1", "sending")
	alice.waitState("sent while offline 2", "sending")
	alice.screenshot("offline-" + transport)

	// Back on the same port and data. Bob's script writes at once, racing the reconnects.
	n.restart()
	for i := 1; i <= 3; i++ {
		n.api.MustDo(t, "POST", "/v1/messages", bobAPI, map[string]any{
			"conv_id": conv, "client_msg_id": fmt.Sprintf("script-%d", i), "content_type": 1,
			"content": map[string]string{"text": fmt.Sprintf("from bob's script %d", i)},
		}, nil)
	}

	// Alice's outbox drains once her page is back (an entry leaves it only with its ack).
	alice.waitJS("alice's outbox to drain", `!document.querySelector('#messages li.msg.pending')`)
	want := n.history(bobAPI, conv)
	if len(want) != 6 {
		t.Fatalf("server has %d messages, want 6: %+v", len(want), want)
	}
	for _, p := range []*page{alice, bob} {
		p.waitOnline()
		p.waitJS("all 6 messages", `document.querySelectorAll('#messages li.msg[data-seq]:not([data-seq="0"])').length === 6 && !document.querySelector('#messages li.msg.pending')`)
		assertShownAsStored(t, p, want)
	}
	alice.waitState("sent while offline 2", "read") // bob's page has the chat open
	alice.screenshot("reconnected-" + transport)

	// A reload resumes from the saved cursor: no snapshot, same messages.
	alice.do("reload", chromedp.Reload())
	alice.waitOnline()
	alice.waitJS("the chat restored", `document.querySelectorAll('#messages li.msg').length === 6`)
	var snapshots int
	alice.eval(`window.parleyClient.stats.snapshots`, &snapshots)
	if snapshots != 0 {
		t.Errorf("after a reload the client took %d snapshots, want 0 (resume from the saved cursor)", snapshots)
	}
	assertShownAsStored(t, alice, want)
}

// assertShownAsStored checks that a page shows exactly the server's messages: same seqs, in
// order, same texts, each once.
func assertShownAsStored(t *testing.T, p *page, stored []apiMessage) {
	t.Helper()
	type row struct {
		Seq  int64
		Text string
	}
	var want, got []row
	for _, m := range stored {
		want = append(want, row{m.Seq, m.text()})
	}
	shown := p.messages()
	assertNoDuplicates(t, shown)
	for _, m := range shown {
		got = append(got, row{m.Seq, m.Text})
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s shows\n  %v\nthe server has\n  %v", p.name, got, want)
	}
}

package webtest

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// TestChat drives the client as people use it: two users in two browser contexts (separate
// profiles), plus a second tab of one user on another device.
//
//   - Direct chat: ticks go sent -> delivered -> read; a reply appears at once.
//   - Multi-device: a message to alice shows a badge in both of her tabs; reading it in one
//     clears the badge in the other; a send from one tab appears in the other.
//   - Recall: the content disappears for the recipient and for the sender's other tab.
//   - Group: sender names, "read by N of M" from receipts.
//   - Keyboard only: list navigation with arrow keys, Enter to open, Enter to send, Escape
//     to go back; phone and desktop widths.
func TestChat(t *testing.T) {
	n := startNode(t)
	browser := newBrowser(t)
	bobAPI := n.devLogin("bob", "setup") // bob exists but has no page yet: the message stays "sent"
	carol := n.devLogin("carol", "cli")  // carol never opens a page

	alice := newPage(t, browser, "alice/laptop", true)
	alice.do("the sign-in page", chromedp.Navigate(n.url()), chromedp.WaitVisible(chromedp.ID("dev-user")))
	alice.waitJS("the dev sign-in form focused", `document.activeElement?.id === 'dev-user'`)
	alice.screenshot("sign-in")
	alice.signIn(n.url(), "alice", "laptop")
	alice.waitJS("the empty list", `!document.getElementById('conv-empty').hidden`)

	// Alice starts a direct chat with bob and says hello.
	direct := alice.newDirect("bob")
	alice.send("Hi Bob")
	alice.waitState("Hi Bob", "sent")

	// Bob signs in: his client acknowledges delivery, alice's tick becomes "delivered".
	bob := newPage(t, browser, "bob/laptop", true)
	bob.signIn(n.url(), "bob", "laptop")
	bob.waitUnread(bob.convID("alice"), 1)
	alice.waitState("Hi Bob", "delivered")

	// Bob opens the chat: it is read, and alice sees it at once.
	bob.open(direct)
	bob.waitJS("Hi Bob in bob's chat", messageWith("Hi Bob")+` !== undefined`)
	bob.waitJS("a day separator", `document.querySelector('#messages li.day')?.textContent === 'Today'`)
	bob.waitUnread(direct, 0)
	alice.waitState("Hi Bob", "read")
	bob.send("Hello Alice")
	alice.waitJS("bob's reply", messageWith("Hello Alice")+`?.dataset.sender === 'bob'`)
	bob.waitState("Hello Alice", "read") // alice has the chat open, so she reads it at once
	alice.screenshot("desktop-direct-chat")

	// A second tab of alice, on another device, in the same browser profile.
	phone := newPage(t, alice.ctx, "alice/phone", false)
	phone.signIn(n.url(), "alice", "phone")
	phone.waitUnread(phone.convID("bob"), 0)

	// Alice's laptop goes back to the list (Escape), bob writes: both tabs show the badge.
	alice.do("back to the list", chromedp.Focus(chromedp.ID("composer-input")), chromedp.KeyEvent(kb.Escape))
	alice.waitJS("the list without an open chat", `document.getElementById('chat-view').hidden`)
	bob.send("Are you there?")
	alice.waitUnread(direct, 1)
	phone.waitUnread(direct, 1)
	phone.screenshot("desktop-list-unread")

	// Reading it on the laptop clears the badge on the phone.
	alice.open(direct)
	alice.waitUnread(direct, 0)
	phone.waitUnread(direct, 0)
	bob.waitState("Are you there?", "read")

	// A send from the laptop appears on the phone, once.
	alice.send("Yes, from my laptop")
	alice.waitState("Yes, from my laptop", "read")
	phone.open(direct)
	phone.waitState("Yes, from my laptop", "read")
	phone.waitState("Hi Bob", "read")
	assertNoDuplicates(t, phone.messages())

	// Recall: the content disappears for bob and on alice's phone.
	alice.click("recall Hi Bob", chromedp.CSS(`#messages li.msg.mine[data-seq="1"] button.recall`))
	for _, p := range []*page{alice, bob, phone} {
		p.waitJS("seq 1 recalled", `document.querySelector('#messages li.msg[data-seq="1"]')?.dataset.state === 'recalled'`)
		p.waitJS("no trace of the recalled text", `!document.getElementById('messages').textContent.includes('Hi Bob')`)
	}
	bob.waitJS("the list preview without the recalled text", `!document.getElementById('conv-list').textContent.includes('Hi Bob')`)

	// A group: alice creates it with bob and carol and writes.
	alice.do("new group",
		chromedp.Click(chromedp.ID("new-chat")),
		chromedp.WaitVisible(chromedp.ID("new-peer")),
		chromedp.Click(chromedp.CSS(`#new-dialog input[value=group]`)),
		chromedp.WaitVisible(chromedp.ID("new-group-name")),
		chromedp.SendKeys(chromedp.ID("new-group-name"), "Team"),
		chromedp.SendKeys(chromedp.ID("new-members"), "bob, carol"),
		chromedp.Click(chromedp.ID("new-submit")),
		chromedp.WaitVisible(chromedp.ID("composer-input")),
	)
	group := alice.convID("Team")
	alice.waitJS("the group's chat", fmt.Sprintf(`document.getElementById('chat-view').dataset.conv === %q`, group))
	alice.send("Standup at ten")
	alice.waitJS("read by 0 of 2", messageWith("Standup at ten")+`?.dataset.readby === '0/2'`)
	carolSays(t, n, carol, group, "I will be there") // sending moves carol's read position too
	alice.waitJS("carol's message with her name", messageWith("I will be there")+`?.querySelector('.sender')?.textContent === 'carol'`)
	alice.waitJS("read by 1 of 2", messageWith("Standup at ten")+`?.dataset.readby === '1/2'`)

	// Bob, keyboard only: back to the list, arrow to the group, Enter opens it and puts the
	// focus in the message box, Enter sends.
	bob.do("Escape to the list", chromedp.Focus(chromedp.ID("composer-input")), chromedp.KeyEvent(kb.Escape))
	bob.waitJS("focus on the direct chat in the list", fmt.Sprintf(`document.activeElement?.dataset.conv === %q`, direct))
	bob.waitUnread(group, 2)
	bob.do("arrow keys", chromedp.KeyEvent(kb.ArrowUp), chromedp.KeyEvent(kb.ArrowDown), chromedp.KeyEvent(kb.ArrowUp))
	bob.waitJS("focus on the group", fmt.Sprintf(`document.activeElement?.dataset.conv === %q`, group))
	bob.do("Enter opens", chromedp.KeyEvent(kb.Enter))
	bob.waitJS("the group open, focus in the message box", fmt.Sprintf(
		`document.getElementById('chat-view').dataset.conv === %q && document.activeElement?.id === 'composer-input'`, group))
	bob.waitJS("sender names in the group", messageWith("Standup at ten")+`?.querySelector('.sender')?.textContent === 'alice'`)
	bob.do("type and press Enter", chromedp.KeyEvent("Sounds good"), chromedp.KeyEvent(kb.Enter))
	bob.waitJS("the composer cleared", `document.getElementById('composer-input').value === ''`)
	alice.waitJS("bob's keyboard message", messageWith("Sounds good")+`?.dataset.sender === 'bob'`)
	alice.waitJS("read by 2 of 2", messageWith("Standup at ten")+`?.dataset.readby === '2/2'`)
	bob.screenshot("desktop-group-chat")

	// Phone width: one pane at a time, with a back button.
	phone.do("phone viewport", chromedp.EmulateViewport(390, 760, chromedp.EmulateMobile))
	phone.waitJS("the chat alone", `getComputedStyle(document.getElementById('sidebar')).display === 'none' && getComputedStyle(document.getElementById('back')).display !== 'none'`)
	phone.screenshot("phone-chat")
	phone.do("back", chromedp.Click(chromedp.ID("back")))
	phone.waitJS("the list alone", `getComputedStyle(document.getElementById('chat')).display === 'none' && getComputedStyle(document.getElementById('sidebar')).display !== 'none'`)
	phone.screenshot("phone-list")

	// Back on the desktop: a new message from bob waits unread while alice is in the group.
	carolSays(t, n, bobAPI, direct, "See you at ten") // from bob's script
	alice.waitUnread(direct, 1)
	alice.waitJS("the most recently active chat first", fmt.Sprintf(`document.querySelector('#conv-list button.conv')?.dataset.conv === %q`, direct))
	alice.screenshot("desktop-group-chat-sender")
	if path := os.Getenv("PARLEY_WEB_README_SCREENSHOT"); path != "" {
		copyFile(t, alice.screenshot("readme"), path)
	}
	phone.waitUnread(direct, 1) // the phone shows the list: nothing reads it there either
}

// carolSays sends a message over the HTTP API as token's user (carol has no page).
func carolSays(t *testing.T, n *node, token, convID, text string) {
	t.Helper()
	n.api.MustDo(t, "POST", "/v1/messages", token, map[string]any{
		"conv_id": convID, "client_msg_id": "api-" + strings.ReplaceAll(text, " ", "-"), "content_type": 1,
		"content": map[string]string{"text": text},
	}, nil)
}

func assertNoDuplicates(t *testing.T, msgs []shownMessage) {
	t.Helper()
	seen := map[string]bool{}
	for _, m := range msgs {
		key := fmt.Sprint(m.Seq, m.CMID)
		if seen[key] {
			t.Fatalf("message shown twice: %+v in %+v", m, msgs)
		}
		seen[key] = true
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("README screenshot written to %s (%d bytes)", to, len(b))
}

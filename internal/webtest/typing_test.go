package webtest

import (
	"testing"

	"github.com/chromedp/chromedp"
)

// TestTyping: while alice types in the direct chat, bob's open chat shows "alice is
// typing…"; her send clears it.
func TestTyping(t *testing.T) {
	n := startNode(t)
	browser := newBrowser(t)
	alice, bob, direct := aliceWithBob(t, n, browser)
	bob.open(direct)
	bob.waitJS("no one typing", `document.getElementById('typing').textContent === ''`)

	alice.do("type without sending", chromedp.SendKeys(chromedp.ID("composer-input"), "Hel"))
	bob.waitJS("alice is typing", `document.getElementById('typing').textContent === 'alice is typing…'`)
	bob.screenshot("typing")
	alice.do("send", chromedp.SendKeys(chromedp.ID("composer-input"), "lo"), chromedp.Click(chromedp.ID("send")))
	bob.waitJS("the message", messageWith("Hello")+` !== undefined`)
	bob.waitJS("typing cleared by the send", `document.getElementById('typing').textContent === ''`)
}

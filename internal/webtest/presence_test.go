package webtest

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/parleychat/parley/internal/server"
)

// TestPresence: bob's chat list shows a dot on his direct chat with alice while she is
// signed in, none once she checks "Appear offline", and the dot again when she unchecks it.
func TestPresence(t *testing.T) {
	n := startNode(t, func(cfg *server.Config) {
		cfg.Presence.Tick = 20 * time.Millisecond
		cfg.Presence.Coalesce = 50 * time.Millisecond
	})
	browser := newBrowser(t)
	alice, bob, direct := aliceWithBob(t, n, browser)
	dot := `document.querySelector('#conv-list button[data-conv="` + direct + `"] .presence-dot')?.dataset.presence`
	// A page in the background may be away: either is a dot.
	bob.waitJS("alice's dot", `['online', 'away'].includes(`+dot+`)`)
	bob.screenshot("presence")

	alice.waitJS("the setting loaded", `!document.getElementById('presence-hidden').disabled`)
	alice.click("Appear offline", chromedp.CSS("#presence-hidden"))
	bob.waitJS("no dot while alice hides", dot+` === undefined`)
	alice.waitJS("the setting saved", `!document.getElementById('presence-hidden').disabled && document.getElementById('presence-hidden').checked`)
	alice.click("Appear offline, off", chromedp.CSS("#presence-hidden"))
	bob.waitJS("alice's dot again", `['online', 'away'].includes(`+dot+`)`)
}

package webtest

import (
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/parleychat/parley/internal/server"
)

// TestSignInWithToken: without --dev-login the page offers only the token form; a bad token
// is refused with a message, a good one signs in, and signing out returns to the form.
func TestSignInWithToken(t *testing.T) {
	n := startNode(t, func(c *server.Config) { c.Gateway.DevLogin = false })
	n.api.MustDo(t, "POST", "/v1/admin/users", n.api.AdminSecret, map[string]string{"user_id": "dave"}, nil)
	token := n.api.Token(t, "dave", "web")
	browser := newBrowser(t)

	p := newPage(t, browser, "dave", true)
	p.do("the sign-in page", chromedp.Navigate(n.url()), chromedp.WaitVisible(chromedp.ID("tok-user")))
	p.waitJS("only the token form, focused", `document.getElementById('dev-form').hidden && document.activeElement?.id === 'tok-user'`)

	p.do("a bad token",
		chromedp.SendKeys(chromedp.ID("tok-user"), "dave"),
		chromedp.SendKeys(chromedp.ID("tok-token"), "v1.not-a-token"),
		chromedp.Click(chromedp.CSS(`#token-form button[type=submit]`)),
	)
	p.waitJS("the refusal", `document.getElementById('login-error').textContent.includes('Sign-in failed')`)

	p.do("the right token",
		chromedp.SetValue(chromedp.ID("tok-token"), token),
		chromedp.Click(chromedp.CSS(`#token-form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.ID("conv-list")),
	)
	p.waitOnline()
	p.waitJS("the user shown", `document.getElementById('me').textContent === 'dave'`)

	p.do("sign out", chromedp.Click(chromedp.ID("signout")), chromedp.WaitVisible(chromedp.ID("tok-user")))
	p.waitJS("the session forgotten", `sessionStorage.getItem('parley.session') === null && !Object.keys(localStorage).some(k => k.startsWith('parley:dave'))`)
}

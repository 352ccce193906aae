package webtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/parleychat/parley/internal/parleytest"
	"github.com/parleychat/parley/internal/server"
)

// Bounds of the waits. Every wait polls with a deadline; nothing sleeps to synchronise.
const (
	actionTimeout = 20 * time.Second
	waitTimeout   = 15 * time.Second
	pollEvery     = 40 * time.Millisecond
)

// ---- the server ----

// node is one Parley server on a loopback port that stays the same across restarts, on the
// same data directory: a restart is the "network cut" of the reconnect tests.
type node struct {
	t    *testing.T
	cfg  server.Config
	addr string
	mu   sync.Mutex
	api  *parleytest.Server // nil while stopped
}

// startNode starts a server with dev login on; configure may change that and more.
func startNode(t *testing.T, configure ...func(*server.Config)) *node {
	t.Helper()
	cfg := server.DefaultConfig(t.TempDir())
	cfg.AdminSecret = "test-admin-secret-0123456789abcdef"
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Gateway.DevLogin = true
	for _, f := range configure {
		f(&cfg)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &node{t: t, cfg: cfg, addr: ln.Addr().String()}
	n.serve(ln)
	t.Cleanup(n.stop)
	return n
}

func (n *node) url() string { return "http://" + n.addr }

func (n *node) serve(ln net.Listener) {
	srv, err := server.New(context.Background(), n.cfg)
	if err != nil {
		ln.Close()
		n.t.Fatal(err)
	}
	go srv.Serve(ln)
	n.mu.Lock()
	n.api = &parleytest.Server{Server: srv, URL: n.url(), WSURL: "ws://" + n.addr + "/v1/ws", Dir: n.cfg.Data}
	n.mu.Unlock()
}

// stop drains the server as SIGTERM does: WebSockets are closed with 1001, long-polls answered.
func (n *node) stop() {
	n.mu.Lock()
	api := n.api
	n.api = nil
	n.mu.Unlock()
	if api != nil {
		api.Stop(n.t)
	}
}

// restart starts the server again on the same port and data directory.
func (n *node) restart() {
	n.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		ln, err := net.Listen("tcp", n.addr)
		if err == nil {
			n.serve(ln)
			return
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("listen again on %s: %v", n.addr, err)
		}
		time.Sleep(20 * time.Millisecond) // the port is being released; retried until the deadline
	}
}

// devLogin signs in through the endpoint the page uses (creating the user) and returns a token.
func (n *node) devLogin(user, device string) string {
	n.t.Helper()
	var out struct{ Token string }
	n.api.MustDo(n.t, "POST", "/v1/dev/login", "", map[string]string{"user_id": user, "device_id": device}, &out)
	return out.Token
}

// apiMessage is a message as the HTTP API returns it (the fields the tests compare).
type apiMessage struct {
	Seq         int64  `json:"seq"`
	ClientMsgID string `json:"client_msg_id"`
	SenderID    string `json:"sender_id"`
	Recalled    bool   `json:"recalled"`
	Content     any    `json:"content"`
}

func (m apiMessage) text() string {
	if c, ok := m.Content.(map[string]any); ok {
		s, _ := c["text"].(string)
		return s
	}
	return ""
}

// history returns every message of a conversation, as token's user sees it.
func (n *node) history(token, convID string) []apiMessage {
	n.t.Helper()
	var out struct{ Messages []apiMessage }
	n.api.MustDo(n.t, "GET", "/v1/conversations/"+convID+"/messages?limit=200", token, nil, &out)
	return out.Messages
}

// ---- the browser ----

// chromiumPath finds the browser: $PARLEY_CHROMIUM, else Debian's chromium on $PATH.
func chromiumPath() string {
	if p := os.Getenv("PARLEY_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// newBrowser starts a headless Chromium for one test, with the flags this sandboxed,
// offline machine needs, on a fresh profile. It skips the test when no Chromium is installed.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	path := chromiumPath()
	if path == "" {
		t.Skip("browser tests skipped: no Chromium found (install Debian's chromium with `apt-get install -y chromium`, as .ci/run does, or set PARLEY_CHROMIUM)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("lang", "en-GB"),
		chromedp.WindowSize(1200, 760),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
	})
	if err := chromedp.Do(bctx); err != nil { // starts the browser, bound to bctx
		t.Fatalf("start chromium (%s): %v", path, err)
	}
	return bctx
}

// page is one browser tab.
type page struct {
	t    *testing.T
	name string
	ctx  context.Context
	mu   sync.Mutex
	logs []string // the page's console, printed if the test fails
}

// newPage opens a tab. With isolated it gets a browser context of its own (like a separate
// browser profile: its own localStorage); otherwise it shares parent's (another tab).
func newPage(t *testing.T, parent context.Context, name string, isolated bool) *page {
	t.Helper()
	var opts []chromedp.ContextOption
	if isolated {
		opts = append(opts, chromedp.WithNewBrowserContext())
	}
	ctx, cancel := chromedp.NewContext(parent, opts...)
	t.Cleanup(cancel)
	p := &page{t: t, name: name, ctx: ctx}
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("%s: open tab: %v", name, err)
	}
	console := chromedp.Console(ctx)
	go func() {
		for m, err := range console {
			if err != nil {
				return
			}
			p.mu.Lock()
			p.logs = append(p.logs, m.String())
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		if t.Failed() {
			p.mu.Lock()
			t.Logf("console of %s:\n  %s", name, strings.Join(p.logs, "\n  "))
			p.mu.Unlock()
		}
	})
	return p
}

// do runs actions with a deadline and fails the test on error.
func (p *page) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, actionTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.t.Fatalf("%s: %s: %v", p.name, what, err)
	}
}

// eval evaluates a JavaScript expression and decodes its (JSON) value into out.
func (p *page) eval(expr string, out any) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, actionTimeout)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		p.t.Fatalf("%s: evaluate %q: %v", p.name, expr, err)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			p.t.Fatalf("%s: decode %s: %v", p.name, raw, err)
		}
	}
}

// waitJS polls a JavaScript predicate until it is truthy, failing after waitTimeout.
func (p *page) waitJS(what, predicate string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, waitTimeout+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](predicate,
		chromedp.WithPollingInterval(pollEvery), chromedp.WithPollingTimeout(waitTimeout)))
	if err != nil {
		var dump string
		p.eval(`JSON.stringify({status: document.getElementById('status')?.dataset.status, list: [...document.querySelectorAll('#conv-list button.conv')].map(b => b.getAttribute('aria-label')), msgs: [...document.querySelectorAll('#messages li.msg')].map(li => li.dataset.state + ' ' + li.dataset.seq + ' ' + li.textContent)})`, &dump)
		p.t.Fatalf("%s: waiting for %s: %v\npage: %s", p.name, what, err, dump)
	}
}

// ---- the page's UI ----

// signIn opens the client at url and signs in with the dev login form.
func (p *page) signIn(url, user, device string) {
	p.t.Helper()
	p.do("sign in as "+user,
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.ID("dev-user")),
		chromedp.SendKeys(chromedp.ID("dev-user"), user),
		chromedp.SendKeys(chromedp.ID("dev-device"), device),
		chromedp.Click(chromedp.CSS(`#dev-form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.ID("conv-list")),
	)
	p.waitOnline()
}

func (p *page) waitOnline() {
	p.t.Helper()
	p.waitJS("the client to be online", `document.getElementById('status').dataset.status === 'online'`)
}

// convID returns the conv_id of the conversation listed with title, waiting for it.
func (p *page) convID(title string) string {
	p.t.Helper()
	expr := fmt.Sprintf(`[...document.querySelectorAll('#conv-list button.conv')].find(b => b.querySelector('.conv-title').textContent === %q)?.dataset.conv`, title)
	p.waitJS("conversation "+title+" in the list", expr)
	var id string
	p.eval(expr, &id)
	return id
}

func convButton(convID string) chromedp.CSS {
	return chromedp.CSS(fmt.Sprintf(`#conv-list button.conv[data-conv=%q]`, convID))
}

// click clicks the element sel finds. The page re-renders as events arrive, so a node found
// by the query may be replaced before the click lands: that error is retried until a deadline.
func (p *page) click(what string, sel chromedp.CSS) {
	p.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		ctx, cancel := context.WithTimeout(p.ctx, actionTimeout)
		err := chromedp.Do(ctx, chromedp.Click(sel))
		cancel()
		if err == nil {
			return
		}
		if !strings.Contains(err.Error(), "Could not find node") || time.Now().After(deadline) {
			p.t.Fatalf("%s: %s: %v", p.name, what, err)
		}
	}
}

// open clicks a conversation in the list and waits for its chat view.
func (p *page) open(convID string) {
	p.t.Helper()
	p.click("open "+convID, convButton(convID))
	p.waitJS("chat view of "+convID, fmt.Sprintf(`document.getElementById('chat-view').dataset.conv === %q && !document.getElementById('chat-view').hidden`, convID))
}

// newDirect starts a direct chat with peer from the New chat dialog, which then shows it,
// and returns its conv_id.
func (p *page) newDirect(peer string) string {
	p.t.Helper()
	p.do("new direct chat with "+peer,
		chromedp.Click(chromedp.ID("new-chat")),
		chromedp.WaitVisible(chromedp.ID("new-peer")),
		chromedp.SendKeys(chromedp.ID("new-peer"), peer),
		chromedp.Click(chromedp.ID("new-submit")),
		chromedp.WaitVisible(chromedp.ID("composer-input")),
	)
	return p.convID(peer)
}

// unread is the badge count of a conversation in the list (0 without a badge).
func (p *page) waitUnread(convID string, n int) {
	p.t.Helper()
	p.waitJS(fmt.Sprintf("%d unread in %s", n, convID), fmt.Sprintf(
		`(() => { const b = document.querySelector('#conv-list button.conv[data-conv=%q]'); if (!b) return false;
		  const badge = b.querySelector('.badge'); return b.dataset.unread === '%d' && (%d === 0 ? !badge : badge && badge.textContent === '%d'); })()`,
		convID, n, n, n))
}

// send types a message and sends it with the Send button.
func (p *page) send(text string) {
	p.t.Helper()
	p.do("send "+text,
		chromedp.SendKeys(chromedp.ID("composer-input"), text),
		chromedp.Click(chromedp.ID("send")),
	)
}

// shownMessage is a message as the page shows it.
type shownMessage struct {
	Seq    int64  `json:"seq"`
	CMID   string `json:"cmid"`
	State  string `json:"state"`
	Sender string `json:"sender"`
	Text   string `json:"text"`
	ReadBy string `json:"readby"`
}

const shownMessagesJS = `[...document.querySelectorAll('#messages li.msg')].map(li => ({
	seq: Number(li.dataset.seq), cmid: li.dataset.cmid, state: li.dataset.state, sender: li.dataset.sender,
	text: li.querySelector('.text').textContent, readby: li.dataset.readby || ''}))`

func (p *page) messages() []shownMessage {
	p.t.Helper()
	var out []shownMessage
	p.eval(shownMessagesJS, &out)
	return out
}

// messageWith is a JS expression for the li of the message whose text is text.
func messageWith(text string) string {
	return fmt.Sprintf(`[...document.querySelectorAll('#messages li.msg')].find(li => li.querySelector('.text').textContent === %q)`, text)
}

// waitState waits until the message with text shows state (sending, sent, delivered, read).
func (p *page) waitState(text, state string) {
	p.t.Helper()
	p.waitJS(fmt.Sprintf("%q to be %s", text, state), fmt.Sprintf(`%s?.dataset.state === %q`, messageWith(text), state))
}

// ---- screenshots ----

var (
	shotsOnce sync.Once
	shotsDir  string
	shotsErr  error
)

// screenshot saves the page as <name>.png in the run's screenshot folder ($PARLEY_WEB_SCREENSHOTS,
// or a new temporary folder, logged once), so a person can look at the main views.
func (p *page) screenshot(name string) string {
	p.t.Helper()
	shotsOnce.Do(func() {
		shotsDir = os.Getenv("PARLEY_WEB_SCREENSHOTS")
		if shotsDir == "" {
			shotsDir, shotsErr = os.MkdirTemp("", "parley-web-screenshots-")
		} else {
			shotsErr = os.MkdirAll(shotsDir, 0o755)
		}
	})
	if shotsErr != nil {
		p.t.Fatalf("screenshot folder: %v", shotsErr)
	}
	ctx, cancel := context.WithTimeout(p.ctx, actionTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		p.t.Fatalf("%s: screenshot %s: %v", p.name, name, err)
	}
	path := filepath.Join(shotsDir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot: %s", path)
	return path
}

// aliceWithBob signs alice and bob in, each in a browser of their own, after alice has
// started a direct chat with bob; it returns both pages and the chat's id.
func aliceWithBob(t *testing.T, n *node, browser context.Context) (alice, bob *page, direct string) {
	t.Helper()
	n.devLogin("bob", "setup") // a direct chat needs bob to exist
	alice = newPage(t, browser, "alice/laptop", true)
	alice.signIn(n.url(), "alice", "laptop")
	direct = alice.newDirect("bob")
	bob = newPage(t, browser, "bob/laptop", true)
	bob.signIn(n.url(), "bob", "laptop")
	return alice, bob, direct
}

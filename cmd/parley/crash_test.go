package main

// The crash test: a real `parley serve` subprocess is killed with SIGKILL in the middle of
// traffic, twice, and restarted on the same data directory. Every ack a client held before the
// kill must survive with its original seq and msg_id, re-sends must deduplicate, and every
// conversation's seqs and every user's sync cursors must stay gapless and repeat-free.
//
// The helpers here (building the binary once, running it as a subprocess, reading its
// listening address from stdout) are shared with main_test.go.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/internal/server"
	"github.com/parleychat/parley/internal/store/postgres/pgtest"
)

// TestMain removes the binary built by parleyBinary once every test has run.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	binDir    string // temporary directory holding the built binary; removed by TestMain
	binPath   string
	buildErr  error
)

// errNoGoTool marks a build that could not even start because the go tool is missing.
var errNoGoTool = errors.New("go tool not found")

// parleyBinary builds ./cmd/parley once per test run (with this test's own module) and returns
// its path. It skips the test when the go tool is unavailable.
func parleyBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			buildErr = fmt.Errorf("%w: %v", errNoGoTool, err)
			return
		}
		if binDir, buildErr = os.MkdirTemp("", "parley-bin-"); buildErr != nil {
			return
		}
		path := filepath.Join(binDir, "parley")
		cmd := exec.Command(goTool, "build", "-o", path, ".")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		binPath = path
	})
	if errors.Is(buildErr, errNoGoTool) {
		t.Skipf("cannot build the parley binary for a subprocess test: %v", buildErr)
	}
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// listenRE matches serve's announcement: "parley dev listening on http://ADDR (data DIR)".
var listenRE = regexp.MustCompile(`listening on (http://\S+) \(data `)

// lineWriter collects a program's output (it is safe for concurrent use, so it can be both a
// subprocess's Stdout and an in-process run's stdout) and reports the first base URL that
// serve announces on urls.
type lineWriter struct {
	mu      sync.Mutex // guards buf and partial
	buf     bytes.Buffer
	partial []byte
	urls    chan string // capacity 1: the first announced URL
}

func newLineWriter() *lineWriter { return &lineWriter{urls: make(chan string, 1)} }

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		if m := listenRE.FindSubmatch(w.partial[:i]); m != nil {
			select {
			case w.urls <- string(m[1]):
			default:
			}
		}
		w.partial = w.partial[i+1:]
	}
	return len(p), nil
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// proc is one `parley serve` subprocess.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	URL    string
	stdout *lineWriter
	stderr *lineWriter
	done   chan struct{} // closed when the process has exited
	err    error         // cmd.Wait's result; read after done
}

// startServe runs `parley serve --addr 127.0.0.1:0 --data dir args...`, waits for the address
// it announces on stdout and for /healthz to answer 200. The process is killed when the test
// ends if it is still running.
func startServe(t *testing.T, dir string, args ...string) *proc {
	t.Helper()
	return startServeEnv(t, dir, nil, args...)
}

// startServeEnv is startServe with the variables env (KEY=value) added to the process's
// environment.
func startServeEnv(t *testing.T, dir string, env []string, args ...string) *proc {
	t.Helper()
	bin := parleyBinary(t)
	argv := append([]string{"serve", "--addr", "127.0.0.1:0", "--data", dir, "--log-level", "warn"}, args...)
	p := &proc{t: t, stdout: newLineWriter(), stderr: newLineWriter(), done: make(chan struct{})}
	p.cmd = exec.Command(bin, argv...)
	p.cmd.Env = append(cleanEnv(), env...)
	p.cmd.Stdout = p.stdout
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start parley: %v", err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	deadline := time.NewTimer(15 * time.Second)
	defer deadline.Stop()
	select {
	case p.URL = <-p.stdout.urls:
	case <-p.done:
		t.Fatalf("parley serve exited before listening: %v\nstdout:\n%s\nstderr:\n%s", p.err, p.stdout, p.stderr)
	case <-deadline.C:
		t.Fatalf("parley serve announced no address within 15s\nstdout:\n%s\nstderr:\n%s", p.stdout, p.stderr)
	}
	waitHealthy(t, p.URL, p.done)
	return p
}

// cleanEnv is the test's environment without PARLEY_* variables, which would configure the
// subprocess behind the test's back.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PARLEY_") {
			env = append(env, kv)
		}
	}
	return env
}

// waitHealthy polls GET /healthz until it answers 200, failing after 10 s or if exited closes.
func waitHealthy(t *testing.T, baseURL string, exited <-chan struct{}) {
	t.Helper()
	waitHealthz(t, baseURL, http.StatusOK, 10*time.Second, exited)
}

// waitHealthz polls GET /healthz every 10 ms until it answers want, failing after limit or
// if exited (which may be nil) closes.
func waitHealthz(t *testing.T, baseURL string, want int, limit time.Duration, exited <-chan struct{}) {
	t.Helper()
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := hc.Get(baseURL + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/healthz did not answer %d within %v (last error %v)", baseURL, want, limit, err)
		}
		select {
		case <-exited:
			t.Fatalf("server exited while waiting for /healthz")
		case <-tick.C:
		}
	}
}

// kill ends the process with SIGKILL and waits for it to be gone.
func (p *proc) kill() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		p.t.Fatalf("SIGKILL: %v", err)
	}
	p.wait(10 * time.Second)
	var ee *exec.ExitError
	if !errors.As(p.err, &ee) {
		p.t.Fatalf("killed process: Wait returned %v, want an *exec.ExitError", p.err)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		p.t.Fatalf("process did not die of SIGKILL: %v", p.err)
	}
}

// wait waits up to d for the process to exit.
func (p *proc) wait(d time.Duration) {
	p.t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		p.t.Fatalf("parley did not exit within %v\nstderr:\n%s", d, p.stderr)
	}
}

// ---- the crash test ----

const (
	crashUsers       = 8
	sendersPerUser   = 2  // concurrent SendWithID loops per client: up to 16 sends in flight
	msgsPerRound     = 45 // new messages per sender per round
	killAfterAcks    = 300
	crashAdminSecret = "crash-test-admin-secret-0123456789abcdef"
)

// crashMsg is one message the test sends, identified by its pre-chosen client_msg_id.
type crashMsg struct {
	id     string
	convID string
	user   int

	ack        *client.MessageAck // the first ack received: the original
	ackedRound int                // the round (1-based) that got the first ack
	inFlightIn []int              // the rounds whose kill caught this message in flight
}

// sender owns a queue of messages that it sends in order; only its goroutine touches them
// during a round, and the test reads them between rounds.
type sender struct {
	user  int
	queue []*crashMsg
}

// roundStats are the numbers of one kill/restart cycle.
type roundStats struct {
	ackedBeforeKill int // acks received in this round before the server died
	inFlight        int // sends cut off by the kill: outcome unknown
	resent          int // of those, acked after a restart, re-sent with the same client_msg_id
	duplicates      int // re-sends answered duplicate:true (committed, ack lost in the kill)
}

type crashWorld struct {
	t       *testing.T
	dir     string
	tokens  []string
	convs   []string       // every conversation
	members [][]int        // members[i]: users of convs[i]
	ofUser  map[int][]int  // user -> indexes into convs
	byID    map[string]int // conv_id -> index
	senders []*sender
	msgs    []*crashMsg
}

func userName(i int) string { return fmt.Sprintf("crash-u%d", i) }

// clientFor returns an SDK client of user u against baseURL. WebSocket sessions are opened by
// the caller; the HTTP client is private so that idle connections die with the round.
func (w *crashWorld) clientFor(baseURL string, u int) *client.Client {
	return client.New(client.Options{
		BaseURL:        baseURL,
		Token:          w.tokens[u],
		UserID:         userName(u),
		HTTPClient:     &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()},
		RequestTimeout: 5 * time.Second,
		Backoff:        client.Backoff{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond},
	})
}

// TestCrashRecovery runs the crash test on each engine: a new data directory's default
// (Pebble) and one created with --store sqlite, which existing installations keep.
func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test runs a subprocess server; skipped in -short mode")
	}
	for _, engine := range []string{"", "sqlite", "postgres"} {
		t.Run(cmp.Or(engine, "default"), func(t *testing.T) { testCrashRecovery(t, engine) })
	}
}

// crashArgs are the serve flags of the crash tests on engine ("" for the default); a
// PostgreSQL store gets a schema of its own in the test database (or the test is skipped).
func crashArgs(t *testing.T, engine string) []string {
	args := []string{"--admin-secret", crashAdminSecret, "--send-rate", "0", "--request-rate", "0"}
	switch engine {
	case "":
	case "postgres":
		args = append(args, "--store", engine, "--postgres-url", pgtest.SchemaURL(t, t.Name()), "--blob-store", "file://"+t.TempDir())
	default:
		args = append(args, "--store", engine)
	}
	return args
}

func testCrashRecovery(t *testing.T, engine string) {
	w := &crashWorld{t: t, dir: t.TempDir(), ofUser: map[int][]int{}, byID: map[string]int{}}
	args := crashArgs(t, engine)
	// The first start builds the binary, which under a loaded "go test ./..." can take long:
	// the test's own deadline starts once the server is up.
	srv := startServe(t, w.dir, args...)
	if got, want := server.DetectEngine(w.dir), cmp.Or(engine, server.DefaultEngine); engine != "postgres" && got != want {
		t.Fatalf("the server created a %q store, want %q", got, want)
	}
	w.crashRounds(srv.URL, func(int) []*proc { return []*proc{srv} }, func(round int) *proc {
		srv = startServe(t, w.dir, args...) // restarted on the same data
		return srv
	})
}

// crashRounds runs the crash test's rounds: in rounds 1 and 2 one node is killed with
// SIGKILL once killAfterAcks acks have arrived, then after dies it runs again; the
// final round runs every queue to the end. nodes(round) lists the live nodes of a round;
// users are spread over them, and the first is the one killed. Every ack must survive
// with its seq, every re-send deduplicate, and every log stay gapless.
func (w *crashWorld) crashRounds(setupURL string, nodes func(round int) []*proc, dies func(round int) *proc) {
	t := w.t
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	w.setup(ctx, setupURL)
	spread := func(round int) func(int) string {
		live := nodes(round)
		return func(u int) string { return live[u%len(live)].URL }
	}

	stats := make([]roundStats, 2)
	for round := 1; round <= 2; round++ {
		w.addMessages(round)
		stats[round-1].ackedBeforeKill = w.runRound(ctx, spread(round), round, nodes(round)[0])
		next := dies(round)
		// Before anything is re-sent: every ack held so far must already be there.
		w.verifyHistory(ctx, next.URL, false)
	}
	// Final round: no kill; re-send what is in flight and complete the rest.
	w.runRound(ctx, spread(3), 3, nil)
	url := nodes(3)[0].URL
	w.verifyHistory(ctx, url, true)
	for _, m := range w.msgs {
		if n := len(m.inFlightIn); n > 0 {
			last := m.inFlightIn[n-1] - 1
			stats[last].resent++
			stats[last].duplicates += boolInt(m.ack.Duplicate)
			for _, r := range m.inFlightIn {
				stats[r-1].inFlight++
			}
		}
	}
	if stats[0].inFlight+stats[1].inFlight == 0 {
		t.Errorf("no send was in flight at either kill: the test did not exercise unknown outcomes")
	}
	dups := w.resendAll(ctx, url)
	w.verifySync(ctx, url)

	for i, s := range stats {
		t.Logf("round %d: %d acked before the kill, %d in flight, %d re-sent after restart, %d of them duplicate:true",
			i+1, s.ackedBeforeKill, s.inFlight, s.resent, s.duplicates)
	}
	t.Logf("total %d messages in %d conversations; %d acked ids re-sent at the end, all duplicate:true; %v",
		len(w.msgs), len(w.convs), dups, time.Since(start).Round(time.Millisecond))
}

// setup creates the users, their tokens, 8 direct conversations (a ring) and one group of 5.
func (w *crashWorld) setup(ctx context.Context, baseURL string) {
	t := w.t
	admin := client.NewAdmin(baseURL, crashAdminSecret, nil)
	for u := range crashUsers {
		if _, _, err := admin.CreateUser(ctx, userName(u), ""); err != nil {
			t.Fatalf("create user: %v", err)
		}
		tok, err := admin.IssueToken(ctx, userName(u), "d1", 0)
		if err != nil {
			t.Fatalf("issue token: %v", err)
		}
		w.tokens = append(w.tokens, tok.Token)
	}
	add := func(id string, members []int) {
		if _, ok := w.byID[id]; ok {
			t.Fatalf("conversation %s created twice", id)
		}
		w.byID[id] = len(w.convs)
		for _, m := range members {
			w.ofUser[m] = append(w.ofUser[m], len(w.convs))
		}
		w.convs = append(w.convs, id)
		w.members = append(w.members, members)
	}
	for u := range crashUsers {
		peer := (u + 1) % crashUsers
		c, err := w.clientFor(baseURL, u).CreateDirect(ctx, userName(peer))
		if err != nil {
			t.Fatalf("create direct: %v", err)
		}
		add(c.ConvID, []int{u, peer})
	}
	group := []int{0, 1, 2, 3, 4}
	var names []string
	for _, m := range group[1:] {
		names = append(names, userName(m))
	}
	g, err := w.clientFor(baseURL, 0).CreateGroup(ctx, "crash-group", names, false)
	if err != nil {
		t.Fatalf("create group: %v", err)
	}
	add(g.ConvID, group)
	for u := range crashUsers {
		for range sendersPerUser {
			w.senders = append(w.senders, &sender{user: u})
		}
	}
}

// addMessages gives every sender msgsPerRound new messages, spread over its user's
// conversations.
func (w *crashWorld) addMessages(round int) {
	for si, s := range w.senders {
		convs := w.ofUser[s.user]
		for i := range msgsPerRound {
			m := &crashMsg{
				id:     fmt.Sprintf("u%d-s%d-r%d-%03d", s.user, si, round, i),
				convID: w.convs[convs[(i+si)%len(convs)]],
				user:   s.user,
			}
			s.queue = append(s.queue, m)
			w.msgs = append(w.msgs, m)
		}
	}
}

// runRound sends every sender's unacked messages in order, each user's client on the node
// nodeOf names, clients of even users over the WebSocket and of odd users over HTTP. With p set, it SIGKILLs p once killAfterAcks acks have
// arrived in this round, then stops the senders; without, it runs every queue to the end.
// It returns the number of acks received in the round.
func (w *crashWorld) runRound(ctx context.Context, nodeOf func(user int) string, round int, p *proc) int {
	t := w.t
	t.Helper()
	clients := make([]*client.Client, crashUsers)
	for u := range clients {
		clients[u] = w.clientFor(nodeOf(u), u)
		if u%2 == 0 {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := clients[u].Connect(cctx)
			cancel()
			if err != nil {
				t.Fatalf("round %d: connect %s: %v", round, userName(u), err)
			}
		}
	}
	roundCtx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		acks      atomic.Int64
		reached   = make(chan struct{})
		reachOnce sync.Once
		wg        sync.WaitGroup
		failMu    sync.Mutex
		failures  []string
	)
	fail := func(format string, args ...any) {
		failMu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		failMu.Unlock()
	}
	for _, s := range w.senders {
		c := clients[s.user]
		wg.Go(func() {
			for _, m := range s.queue {
				if m.ack != nil {
					continue
				}
				content, _ := json.Marshal(m.id)
				ack, err := c.SendWithID(roundCtx, m.id, m.convID, client.ContentText, json.RawMessage(content), nil)
				if err != nil {
					if roundCtx.Err() != nil {
						// Cut off by the kill: committed or not, we cannot know.
						m.inFlightIn = append(m.inFlightIn, round)
						return
					}
					fail("send %s: %v", m.id, err)
					return
				}
				if ack.Duplicate && len(m.inFlightIn) == 0 {
					fail("first send of %s answered duplicate:true: %+v", m.id, ack)
				}
				if ack.ConvID != m.convID || ack.ClientMsgID != m.id || ack.Seq < 1 || ack.MsgID == "" {
					fail("send %s: bad ack %+v", m.id, ack)
				}
				m.ack, m.ackedRound = &ack, round
				if acks.Add(1) == killAfterAcks {
					reachOnce.Do(func() { close(reached) })
				}
			}
		})
	}
	if p != nil {
		timer := time.NewTimer(30 * time.Second)
		select {
		case <-reached:
		case <-timer.C:
			t.Fatalf("round %d: only %d acks within 30s", round, acks.Load())
		}
		timer.Stop()
		p.kill()
		stop() // the server is gone: whatever has not been acked by now is in flight or unsent
	}
	wg.Wait()
	for u, c := range clients {
		if u%2 == 0 {
			if err := c.Close(); err != nil {
				t.Errorf("round %d: close session of %s: %v", round, userName(u), err)
			}
		}
	}
	if len(failures) > 0 {
		t.Fatalf("round %d:\n%s", round, strings.Join(failures, "\n"))
	}
	if p == nil {
		for _, m := range w.msgs {
			if m.ack == nil {
				t.Fatalf("final round left %s unacked", m.id)
			}
		}
	}
	return int(acks.Load())
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// history reads a whole conversation as member u, paging by after_seq.
func (w *crashWorld) history(ctx context.Context, c *client.Client, convID string) []client.Message {
	w.t.Helper()
	var all []client.Message
	after := int64(0)
	for {
		page, err := c.History(ctx, convID, client.HistoryQuery{AfterSeq: after, Limit: 200})
		if err != nil {
			w.t.Fatalf("history of %s after %d: %v", convID, after, err)
		}
		all = append(all, page.Messages...)
		if len(page.Messages) > 0 {
			after = page.Messages[len(page.Messages)-1].Seq
		}
		if !page.HasMore {
			return all
		}
		if len(page.Messages) == 0 {
			w.t.Fatalf("history of %s: has_more with an empty page", convID)
		}
	}
}

// verifyHistory checks every conversation: seqs exactly 1..max_seq, each (sender,
// client_msg_id) stored once, every ack held at its original seq and msg_id with the content
// sent. With complete, every message of the test must be stored and nothing else.
func (w *crashWorld) verifyHistory(ctx context.Context, baseURL string, complete bool) {
	t := w.t
	t.Helper()
	type key struct{ sender, id string }
	want := map[key]*crashMsg{}
	for _, m := range w.msgs {
		want[key{userName(m.user), m.id}] = m
	}
	acked, stored := 0, 0
	for ci, convID := range w.convs {
		c := w.clientFor(baseURL, w.members[ci][0])
		// The conversation first: on a cluster, a node that survived a kill may still commit
		// a send whose client gave up, so the history read after it may hold more.
		brief, err := c.GetConversation(ctx, convID)
		if err != nil {
			t.Fatalf("get conversation %s: %v", convID, err)
		}
		msgs := w.history(ctx, c, convID)
		if int64(len(msgs)) < brief.MaxSeq || (complete && int64(len(msgs)) != brief.MaxSeq) {
			t.Errorf("%s: history holds %d messages, max_seq is %d", convID, len(msgs), brief.MaxSeq)
		}
		seen := map[key]int64{}
		for i, msg := range msgs {
			if msg.Seq != int64(i+1) {
				t.Fatalf("%s: message %d has seq %d: seqs are not 1..max_seq", convID, i, msg.Seq)
			}
			k := key{msg.SenderID, msg.ClientMsgID}
			if prev, ok := seen[k]; ok {
				t.Errorf("%s: %s/%s stored twice, at seq %d and %d", convID, k.sender, k.id, prev, msg.Seq)
			}
			seen[k] = msg.Seq
			m := want[k]
			switch {
			case m == nil:
				t.Errorf("%s: seq %d is %s/%s, which the test never sent", convID, msg.Seq, k.sender, k.id)
				continue
			case m.convID != convID:
				t.Errorf("%s: seq %d is %s, sent to %s", convID, msg.Seq, m.id, m.convID)
			case string(msg.Content) != fmt.Sprintf("%q", m.id):
				t.Errorf("%s: seq %d content %s, want %q", convID, msg.Seq, msg.Content, m.id)
			}
			stored++
		}
		for _, m := range w.msgs {
			if m.convID != convID {
				continue
			}
			seq, ok := seen[key{userName(m.user), m.id}]
			switch {
			case m.ack != nil && !ok:
				t.Errorf("%s: acked message %s (seq %d, round %d) is lost", convID, m.id, m.ack.Seq, m.ackedRound)
			case m.ack != nil && (seq != m.ack.Seq || msgs[seq-1].MsgID != m.ack.MsgID):
				t.Errorf("%s: acked message %s was seq %d msg_id %s, now seq %d msg_id %s",
					convID, m.id, m.ack.Seq, m.ack.MsgID, seq, msgs[seq-1].MsgID)
			case complete && !ok:
				t.Errorf("%s: message %s never stored", convID, m.id)
			}
			if m.ack != nil {
				acked++
			}
		}
	}
	if complete && stored != len(w.msgs) {
		t.Errorf("%d messages stored, want %d", stored, len(w.msgs))
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("history: %d acks verified, %d messages stored in %d conversations", acked, stored, len(w.convs))
}

// resendAll re-sends every message with its original client_msg_id: each must answer
// duplicate:true with the original seq and msg_id. It returns how many it re-sent.
func (w *crashWorld) resendAll(ctx context.Context, baseURL string) int {
	t := w.t
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	for u := range crashUsers {
		c := w.clientFor(baseURL, u)
		if u%2 == 0 {
			if err := c.Connect(ctx); err != nil {
				t.Fatalf("connect %s: %v", userName(u), err)
			}
			defer c.Close()
		}
		wg.Go(func() {
			for _, m := range w.msgs {
				if m.user != u {
					continue
				}
				content, _ := json.Marshal("different content: " + m.id) // dedup ignores content
				ack, err := c.SendWithID(ctx, m.id, m.convID, client.ContentText, json.RawMessage(content), nil)
				mu.Lock()
				switch {
				case err != nil:
					failures = append(failures, fmt.Sprintf("re-send %s: %v", m.id, err))
				case !ack.Duplicate || ack.Seq != m.ack.Seq || ack.MsgID != m.ack.MsgID || ack.ConvID != m.convID:
					failures = append(failures, fmt.Sprintf("re-send %s: got %+v, want duplicate of %+v", m.id, ack, *m.ack))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d re-sends wrong:\n%s", len(failures), strings.Join(failures[:min(len(failures), 20)], "\n"))
	}
	return len(w.msgs)
}

// verifySync reads every user's whole event log from cursor 0 and checks: cursors 1..N with no
// gap, no message event twice, every message of every conversation the user is in exactly
// once (with the stored msg_id), and a snapshot cursor equal to N.
func (w *crashWorld) verifySync(ctx context.Context, baseURL string) {
	t := w.t
	t.Helper()
	type convSeq struct {
		conv string
		seq  int64
	}
	stored := map[convSeq]string{} // -> msg_id
	for _, m := range w.msgs {
		stored[convSeq{m.convID, m.ack.Seq}] = m.ack.MsgID
	}
	for u := range crashUsers {
		c := w.clientFor(baseURL, u)
		var events []client.SyncEvent
		cursor := int64(0)
		for {
			resp, err := c.Sync(ctx, cursor, 1000, 0)
			if err != nil {
				t.Fatalf("%s: sync from %d: %v", userName(u), cursor, err)
			}
			events = append(events, resp.Events...)
			if len(resp.Events) > 0 && resp.Cursor != resp.Events[len(resp.Events)-1].Cursor {
				t.Fatalf("%s: sync cursor %d, last event %d", userName(u), resp.Cursor, resp.Events[len(resp.Events)-1].Cursor)
			}
			if !resp.HasMore {
				break
			}
			if resp.Cursor == cursor {
				t.Fatalf("%s: sync has_more without progress at %d", userName(u), cursor)
			}
			cursor = resp.Cursor
		}
		seen := map[convSeq]int64{}
		for i, ev := range events {
			if ev.Cursor != int64(i+1) {
				t.Fatalf("%s: event %d has cursor %d: cursors are not 1..N", userName(u), i, ev.Cursor)
			}
			if ev.Type != client.EventMessage {
				continue
			}
			var msg client.Message
			if err := json.Unmarshal(ev.Data, &msg); err != nil {
				t.Fatalf("%s: cursor %d: message data %s: %v", userName(u), ev.Cursor, ev.Data, err)
			}
			k := convSeq{ev.ConvID, msg.Seq}
			if prev, ok := seen[k]; ok {
				t.Errorf("%s: message %s seq %d appears at cursors %d and %d", userName(u), k.conv, k.seq, prev, ev.Cursor)
			}
			seen[k] = ev.Cursor
			if id, ok := stored[k]; !ok || id != msg.MsgID || msg.ConvID != ev.ConvID {
				t.Errorf("%s: cursor %d: message %s seq %d msg_id %s does not match the stored %q", userName(u), ev.Cursor, k.conv, k.seq, msg.MsgID, id)
			}
		}
		want := 0
		for _, ci := range w.ofUser[u] {
			for _, m := range w.msgs {
				if m.convID != w.convs[ci] {
					continue
				}
				want++
				if _, ok := seen[convSeq{m.convID, m.ack.Seq}]; !ok {
					t.Errorf("%s: message %s (%s seq %d) missing from the sync log", userName(u), m.id, m.convID, m.ack.Seq)
				}
			}
		}
		if len(seen) != want {
			t.Errorf("%s: %d message events, want %d", userName(u), len(seen), want)
		}
		snap, err := c.Snapshot(ctx, 0)
		if err != nil {
			t.Fatalf("%s: snapshot: %v", userName(u), err)
		}
		if snap.Cursor != int64(len(events)) {
			t.Errorf("%s: snapshot cursor %d, log ends at %d", userName(u), snap.Cursor, len(events))
		}
		if t.Failed() {
			t.FailNow()
		}
	}
}

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/pebble"
	"github.com/parleychat/parley/internal/tier"
)

// TestCrashWhileTiering kills the server (SIGKILL, by its own hand at the step named) at
// each step of sealing a cold segment, and of expiring one or a batch of hot messages,
// while a sender keeps sending, restarts it, and checks that every acked message is in
// history exactly once at its seq, the seqs gapless, and that once a pass has run the blob
// store holds exactly the segments the index names. For the retention steps the sender
// also sends to a group whose owner gave it a retention of one second, with no operator
// retention: what history keeps of it after the restart is a gapless run of what was sent,
// each acked one at its seq, and once all of it has expired the next passes leave none of
// its messages, segments or blobs.
func TestCrashWhileTiering(t *testing.T) {
	if testing.Short() {
		t.Skip("runs subprocess nodes; skipped in -short mode")
	}
	for _, step := range []string{tier.StepAdded, tier.StepStored, tier.StepSealed,
		tier.StepExpiring, tier.StepExpired, tier.StepExpiredHot} {
		t.Run(step, func(t *testing.T) { testCrashWhileTiering(t, step) })
	}
}

func testCrashWhileTiering(t *testing.T, step string) {
	dir := t.TempDir()
	expiring := step == tier.StepExpiring || step == tier.StepExpired || step == tier.StepExpiredHot
	// Messages go cold 300 ms after they are sent, and a pass runs every 50 ms: the first
	// segment is sealed (and the process killed) while the sender is still sending. To
	// reach the expiry of hot messages, nothing goes cold.
	hot := "300ms"
	if step == tier.StepExpiredHot {
		hot = "0"
	}
	args := []string{"--admin-secret", crashAdminSecret, "--send-rate", "0", "--request-rate", "0", "--history-rate", "0",
		"--hot-window", hot, "--tier-every", "50ms", "--group-retention-min", "1s"}
	srv := startServeEnv(t, dir, []string{tierCrashEnv + "=" + step}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tokens := mintUsers(ctx, t, srv.URL, crashAdminSecret, "alice", "bob")
	alice := client.New(client.Options{BaseURL: srv.URL, Token: tokens[0], UserID: "alice"})
	conv, err := alice.CreateDirect(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	convs := []string{conv.ConvID}
	var short string // the group with its own retention
	// A segment of the group must be sealed before its messages are past the retention, so
	// the messages between the hot window and the retention must make a segment: at 10 s
	// they do at 30 sends a second (the race detector on a busy machine), at 1 s they would
	// need some 400. Hot messages expire at 1 s.
	retention := int64(10)
	if step == tier.StepExpiredHot {
		retention = 1
	}
	if expiring {
		g, err := alice.CreateGroup(ctx, "short", []string{"bob"}, false)
		if err == nil {
			_, err = alice.SetRetention(ctx, g.ConvID, retention)
		}
		if err != nil {
			t.Fatal(err)
		}
		short = g.ConvID
		convs = append(convs, short)
	}
	hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone(), Timeout: 5 * time.Second}
	acked := map[string]map[string]int64{} // conv_id -> client_msg_id -> seq
	sent := map[string]bool{}
	for i := 0; ; i++ {
		id, to := fmt.Sprintf("m%05d", i), convs[i%len(convs)]
		sent[id] = true
		seq, err := postMessage(hc, srv.URL, tokens[0], map[string]any{"conv_id": to, "client_msg_id": id,
			"content_type": 1, "content": map[string]any{"text": id}})
		if err != nil {
			break // the server killed itself
		}
		if acked[to] == nil {
			acked[to] = map[string]int64{}
		}
		acked[to][id] = seq
		if i > 40_000 {
			t.Fatalf("the server never reached step %q", step)
		}
	}
	srv.wait(10 * time.Second)
	var ee *exec.ExitError
	if ws, ok := exitStatus(srv.err, &ee); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the server did not die of SIGKILL at %q: %v\nstderr:\n%s", step, srv.err, srv.stderr)
	}
	if n := len(acked[conv.ConvID]); !expiring && n < tier.DefaultMinMessages {
		t.Fatalf("%d messages acked before the kill: the pass sealed before there was a segment's worth", n)
	}

	t.Logf("killed at %q after %d sends", step, len(sent))
	ctx, cancel = context.WithTimeout(context.Background(), 90*time.Second) // the sends may have taken the first
	defer cancel()
	srv = startServe(t, dir, args...)
	waitPasses(t, srv.URL, 2) // the first may have started before the restart's sends were old
	c := client.New(client.Options{BaseURL: srv.URL, Token: tokens[1], UserID: "bob"})
	checkHistory(ctx, t, c, conv.ConvID, sent, acked[conv.ConvID], false)
	if got := metricValue(t, srv.URL, "parley_tier_sealed_messages_total"); got == 0 && !expiring && step != tier.StepSealed {
		t.Errorf("no message sealed after the restart")
	}
	if expiring {
		checkHistory(ctx, t, c, short, sent, acked[short], true)
		waitExpired(ctx, t, c, short, time.Duration(retention)*time.Second)
		passes := metricValue(t, srv.URL, `parley_tier_passes_total{outcome="ok"}`)
		waitPasses(t, srv.URL, passes+2) // one that started after the last expired
		if got := metricValue(t, srv.URL, "parley_tier_expired_messages_total"); got == 0 {
			t.Errorf("parley_tier_expired_messages_total is 0 after the expiry passes")
		}
	}

	srv.kill()
	checkSegmentsMatchBlobs(t, dir, conv.ConvID, hot != "0", short)
}

// checkHistory reads all of convID's history and checks it against what was sent and
// acked: gapless seqs, from 1 or, when expiring, from the first kept (the page's
// expired_before_seq); each message sent once; each acked one at its seq unless it has
// expired (below the first kept).
func checkHistory(ctx context.Context, t *testing.T, c *client.Client, convID string, sent map[string]bool, acked map[string]int64, expiring bool) {
	t.Helper()
	var all []client.Message
	from := int64(1)
	for after := int64(0); ; {
		page, err := c.History(ctx, convID, client.HistoryQuery{AfterSeq: after, Limit: 200})
		if err != nil {
			t.Fatal(err)
		}
		if after == 0 && page.ExpiredBeforeSeq > 0 {
			if !expiring {
				t.Fatalf("%s: expired_before_seq %d in a conversation that keeps everything", convID, page.ExpiredBeforeSeq)
			}
			from = page.ExpiredBeforeSeq
		}
		all = append(all, page.Messages...)
		if !page.HasMore {
			break
		}
		after = page.Messages[len(page.Messages)-1].Seq
	}
	seen := map[string]int64{}
	for i, m := range all {
		if m.Seq != from+int64(i) {
			t.Fatalf("%s: history seq %d at %d: want gapless from %d", convID, m.Seq, i, from)
		}
		if _, dup := seen[m.ClientMsgID]; dup {
			t.Fatalf("%s: %s stored twice", convID, m.ClientMsgID)
		}
		seen[m.ClientMsgID] = m.Seq
		if !sent[m.ClientMsgID] {
			t.Fatalf("%s: history has %q, which was never sent", convID, m.ClientMsgID)
		}
	}
	for id, seq := range acked {
		if seq >= from && seen[id] != seq {
			t.Fatalf("%s: acked %s at seq %d; history has it at %d (0: lost)", convID, id, seq, seen[id])
		}
	}
}

// waitExpired waits until convID's history reads as wholly expired.
func waitExpired(ctx context.Context, t *testing.T, c *client.Client, convID string, retention time.Duration) {
	t.Helper()
	deadline := time.Now().Add(retention + 20*time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		page, err := c.History(ctx, convID, client.HistoryQuery{Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Messages) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: seq %d still kept 20 s past the retention of %v", convID, page.Messages[0].Seq, retention)
		}
		<-tick.C
	}
}

// exitStatus returns the wait status of a process's exit error.
func exitStatus(err error, ee **exec.ExitError) (syscall.WaitStatus, bool) {
	if !errors.As(err, ee) {
		return 0, false
	}
	ws, ok := (*ee).Sys().(syscall.WaitStatus)
	return ws, ok
}

// waitPasses waits until the server at baseURL has ended n tiering passes without failing.
func waitPasses(t *testing.T, baseURL string, n float64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for metricValue(t, baseURL, `parley_tier_passes_total{outcome="ok"}`) < n {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %v tiering passes in 20 s (failed: %v)", n, metricValue(t, baseURL, `parley_tier_passes_total{outcome="failed"}`))
		}
		<-tick.C
	}
}

// metricValue reads one sample of the server's /metrics; 0 when it is absent.
func metricValue(t *testing.T, baseURL, name string) float64 {
	t.Helper()
	resp, err := http.Get(baseURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s = %q", name, v)
			}
			return f
		}
	}
	return 0
}

// checkSegmentsMatchBlobs opens the stopped server's store and checks that no segment is
// pending, that the segment blobs on disk are exactly those its index names for convID
// (some, unless sealed is false), and that the conversation gone, unless "", has no
// message and no segment left: retention deleted all of it.
func checkSegmentsMatchBlobs(t *testing.T, dir, convID string, sealed bool, gone string) {
	t.Helper()
	ctx := context.Background()
	st, err := pebble.Open(ctx, pebble.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	named := map[string]bool{}
	if err := st.View(ctx, func(tx store.ReadTx) error {
		pending, err := tx.PendingSegments(ctx, 10)
		if err != nil {
			return err
		}
		if len(pending) > 0 {
			t.Errorf("pending segments after a pass: %+v", pending)
		}
		segs, err := tx.Segments(ctx, convID, 0, 1000)
		for _, s := range segs {
			named[s.Key] = true
		}
		if err != nil || gone == "" {
			return err
		}
		ms, err := tx.Messages(ctx, gone, store.MessageRange{Limit: 1})
		if err != nil {
			return err
		}
		left, err := tx.Segments(ctx, gone, 0, 1)
		if len(ms) > 0 || len(left) > 0 {
			t.Errorf("%s after its expiry's passes: hot %+v, segments %+v; want none", gone, ms, left)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(named) == 0 && sealed {
		t.Fatal("no segment sealed")
	}
	root := filepath.Join(dir, "blobs")
	var found []string
	err = filepath.WalkDir(filepath.Join(root, "s"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		found = append(found, filepath.ToSlash(rel))
		return nil
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	for _, k := range found {
		if !named[k] {
			t.Errorf("blob %s is a segment the index does not name (an orphan)", k)
		}
		delete(named, k)
	}
	for k := range named {
		t.Errorf("the index names segment %s, which has no blob", k)
	}
}

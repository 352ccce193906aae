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
	"slices"
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
// each step of sealing a cold segment while a sender keeps sending, restarts it, and checks
// that every acked message is in history exactly once at its seq, the seqs gapless, and
// that once a pass has run the blob store holds exactly the segments the index names.
func TestCrashWhileTiering(t *testing.T) {
	if testing.Short() {
		t.Skip("runs subprocess nodes; skipped in -short mode")
	}
	for _, step := range []string{tier.StepAdded, tier.StepStored, tier.StepSealed} {
		t.Run(step, func(t *testing.T) { testCrashWhileTiering(t, step) })
	}
}

func testCrashWhileTiering(t *testing.T, step string) {
	dir := t.TempDir()
	// Messages go cold 300 ms after they are sent, and a pass runs every 50 ms: the first
	// segment is sealed (and the process killed) while the sender is still sending.
	args := []string{"--admin-secret", crashAdminSecret, "--send-rate", "0", "--request-rate", "0",
		"--hot-window", "300ms", "--tier-every", "50ms"}
	srv := startServeEnv(t, dir, []string{tierCrashEnv + "=" + step}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tokens := mintUsers(ctx, t, srv.URL, crashAdminSecret, "alice", "bob")
	conv, err := client.New(client.Options{BaseURL: srv.URL, Token: tokens[0], UserID: "alice"}).CreateDirect(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone(), Timeout: 5 * time.Second}
	acked := map[string]int64{} // client_msg_id -> seq
	var sent []string
	for i := 0; ; i++ {
		id := fmt.Sprintf("m%05d", i)
		sent = append(sent, id)
		seq, err := postMessage(hc, srv.URL, tokens[0], map[string]any{"conv_id": conv.ConvID, "client_msg_id": id,
			"content_type": 1, "content": map[string]any{"text": id}})
		if err != nil {
			break // the server killed itself
		}
		acked[id] = seq
		if i > 20_000 {
			t.Fatalf("the server never reached step %q", step)
		}
	}
	srv.wait(10 * time.Second)
	var ee *exec.ExitError
	if ws, ok := exitStatus(srv.err, &ee); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the server did not die of SIGKILL at %q: %v\nstderr:\n%s", step, srv.err, srv.stderr)
	}
	if len(acked) < tier.DefaultMinMessages {
		t.Fatalf("%d messages acked before the kill: the pass sealed before there was a segment's worth", len(acked))
	}

	srv = startServe(t, dir, args...)
	waitPasses(t, srv.URL, 2) // the first may have started before the restart's sends were old
	c := client.New(client.Options{BaseURL: srv.URL, Token: tokens[1], UserID: "bob"})
	var all []client.Message
	for after := int64(0); ; {
		page, err := c.History(ctx, conv.ConvID, client.HistoryQuery{AfterSeq: after, Limit: 200})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page.Messages...)
		if !page.HasMore {
			break
		}
		after = page.Messages[len(page.Messages)-1].Seq
	}
	seen := map[string]int64{}
	for i, m := range all {
		if m.Seq != int64(i+1) {
			t.Fatalf("history seq %d at %d: want gapless from 1", m.Seq, i)
		}
		if _, dup := seen[m.ClientMsgID]; dup {
			t.Fatalf("%s stored twice", m.ClientMsgID)
		}
		seen[m.ClientMsgID] = m.Seq
		if !slices.Contains(sent, m.ClientMsgID) {
			t.Fatalf("history has %q, which was never sent", m.ClientMsgID)
		}
	}
	for id, seq := range acked {
		if seen[id] != seq {
			t.Fatalf("acked %s at seq %d; history has it at %d (0: lost)", id, seq, seen[id])
		}
	}
	if got := metricValue(t, srv.URL, "parley_tier_sealed_messages_total"); got == 0 && step != tier.StepSealed {
		t.Errorf("no message sealed after the restart")
	}

	srv.kill()
	checkSegmentsMatchBlobs(t, dir, conv.ConvID)
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
// pending and that the segment blobs on disk are exactly those its index names.
func checkSegmentsMatchBlobs(t *testing.T, dir, convID string) {
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
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(named) == 0 {
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

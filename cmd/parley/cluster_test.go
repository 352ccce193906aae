package main

// Cluster fault tests: several `parley serve` processes on one PostgreSQL database, under
// traffic, while a node is killed or the database restarts. They reuse the crash test's
// world (crash_test.go) and its checks.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/internal/store/postgres/pgtest"
)

// TestClusterCrashRecovery runs the crash test on three nodes sharing one PostgreSQL
// database, users spread over them: in round 1 one node is killed with SIGKILL mid-traffic
// and its users move to the two others, in round 2 a second one, and the last node runs
// the final round alone. The checks are the single node's: no acked message lost or
// doubled, every re-send deduplicated (on another node than the first send), every
// conversation and every log gapless.
func TestClusterCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test runs subprocess servers; skipped in -short mode")
	}
	w := &crashWorld{t: t, dir: t.TempDir(), ofUser: map[int][]int{}, byID: map[string]int{}}
	args := crashArgs(t, "postgres")
	cluster := make([]*proc, 3)
	for i := range cluster {
		cluster[i] = startServe(t, t.TempDir(), args...)
	}
	w.crashRounds(cluster[0].URL, func(round int) []*proc {
		return cluster[min(round, 3)-1:] // round 1: all three; 2: the two left; 3: the last
	}, func(round int) *proc { return cluster[round] })
}

// TestClusterPostgresRestart restarts the database under two nodes in the middle of
// traffic, with clients that retry every send that failed (same client_msg_id) until it is
// acked. While the database is down the nodes must fail sends rather than ack them and
// report 503 on /healthz; once it is back they must recover by themselves, and every ack
// must be stored exactly once, every log gapless.
func TestClusterPostgresRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a PostgreSQL server and subprocess nodes; skipped in -short mode")
	}
	pg := pgtest.Private(t)
	w := &crashWorld{t: t, dir: t.TempDir(), ofUser: map[int][]int{}, byID: map[string]int{}}
	args := []string{"--admin-secret", crashAdminSecret, "--send-rate", "0", "--request-rate", "0",
		"--store", "postgres", "--postgres-url", pg.URL, "--blob-store", "file://" + t.TempDir()}
	nodes := []*proc{startServe(t, t.TempDir(), args...), startServe(t, t.TempDir(), args...)}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	w.setup(ctx, nodes[0].URL)
	w.addMessages(1)

	var (
		acks, failed atomic.Int64
		reached      = make(chan struct{})
		reachOnce    sync.Once
		wg           sync.WaitGroup
		failMu       sync.Mutex
		failures     []string
	)
	var unavailable atomic.Int64 // 503 answers the SDK retried
	clients := make([]*client.Client, crashUsers)
	for u := range clients {
		clients[u] = client.New(client.Options{
			BaseURL: nodes[u%len(nodes)].URL, Token: w.tokens[u], UserID: userName(u),
			HTTPClient:     &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()},
			RequestTimeout: 5 * time.Second,
			Backoff:        client.Backoff{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond},
			OnRetry: func(err error, _ time.Duration) {
				if client.ErrorCode(err) == http.StatusServiceUnavailable {
					unavailable.Add(1)
				}
			},
		})
	}
	for _, s := range w.senders {
		c := clients[s.user]
		wg.Go(func() {
			for _, m := range s.queue {
				content, _ := json.Marshal(m.id)
				for {
					ack, err := c.SendWithID(ctx, m.id, m.convID, client.ContentText, json.RawMessage(content), nil)
					if err == nil {
						m.ack = &ack
						break
					}
					if ctx.Err() != nil {
						failMu.Lock()
						failures = append(failures, fmt.Sprintf("send %s never acked: %v", m.id, err))
						failMu.Unlock()
						return
					}
					failed.Add(1)
					m.inFlightIn = append(m.inFlightIn, 1)
					select { // the client's own pause before a retry, not a synchronisation
					case <-ctx.Done():
					case <-time.After(20 * time.Millisecond):
					}
				}
				if acks.Add(1) == killAfterAcks {
					reachOnce.Do(func() { close(reached) })
				}
			}
		})
	}
	select {
	case <-reached:
	case <-ctx.Done():
		t.Fatalf("only %d acks before the restart", acks.Load())
	}
	ackedBefore := acks.Load()
	pg.Stop()
	for _, n := range nodes {
		waitHealthz(t, n.URL, http.StatusServiceUnavailable, 15*time.Second, n.done)
	}
	ackedDown := acks.Load()
	pg.Start()
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d sends failed for good:\n%s", len(failures), strings.Join(failures[:min(len(failures), 20)], "\n"))
	}
	for _, n := range nodes {
		waitHealthy(t, n.URL, n.done)
	}
	if unavailable.Load() == 0 {
		t.Errorf("no send was answered 503 while the database was down: the restart was not exercised")
	}
	w.verifyHistory(ctx, nodes[1].URL, true)
	dups := w.resendAll(ctx, nodes[0].URL)
	w.verifySync(ctx, nodes[1].URL)
	t.Logf("%d acked before the restart, %d more until both nodes reported 503; %d sends answered 503 and retried by the SDK, %d given up and sent again; %d messages, %d re-sent at the end, all duplicate:true",
		ackedBefore, ackedDown-ackedBefore, unavailable.Load(), failed.Load(), len(w.msgs), dups)
}

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/parleytest"
	"github.com/parleychat/parley/internal/push"
	"github.com/parleychat/parley/internal/push/pushtest"
	"github.com/parleychat/parley/internal/server"
	"github.com/parleychat/parley/internal/store"
)

// BenchmarkPushFanoutNode is issue 11's first figure through a whole node: 10,000 offline
// devices registered with the fake FCM (HTTP/2, TLS, OAuth checked) each get one message,
// sent over HTTP as one message to each of 20 groups of 500 (the default largest
// write-fanout group). It reports pushes/s from the first send to the fake's last
// acceptance, and the bucket of parley_push_lag_seconds (commit to acceptance) that holds
// the 99th percentile. The node, the fake and the sender share the two cores.
func BenchmarkPushFanoutNode(b *testing.B) {
	const groups, size = 20, 500
	for range b.N {
		b.StopTimer()
		f := pushtest.NewFCM(b)
		cfg := server.DefaultConfig(b.TempDir())
		st, err := server.OpenStore(context.Background(), cfg, nil)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		err = st.Update(ctx, func(tx store.Tx) error {
			return pushtest.AddFanout(ctx, tx, groups, size, push.FCM)
		})
		if err == nil {
			err = st.Close()
		}
		if err != nil {
			b.Fatal(err)
		}
		cfg.AdminSecret = "test-admin-secret-0123456789abcdef"
		cfg.Gateway.SendRate, cfg.Gateway.FanoutRate, cfg.Gateway.RequestRate = 0, 0, 0
		withFCM(f)(&cfg)
		n := &node{parleytest.StartWith(b, cfg)}
		sender := n.Token(b, "sender", "d1")

		b.StartTimer()
		start := time.Now()
		for g := range groups {
			n.ok(b, "POST", "/v1/messages", sender, map[string]any{"conv_id": pushtest.FanoutConv(g),
				"client_msg_id": "m" + strconv.Itoa(g), "content_type": 1, "content": map[string]any{"text": "hi"}})
		}
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		if err := f.WaitCount(wctx, groups*size); err != nil {
			b.Fatalf("%d of %d pushed: %v", f.Count(), groups*size, err)
		}
		cancel()
		el := time.Since(start)
		b.StopTimer()
		b.ReportMetric(float64(groups*size)/el.Seconds(), "pushes/s")
		b.ReportMetric(lagP99Bucket(b, n), "lag-p99-le-s")
		n.Stop(b)
	}
}

// lagP99Bucket returns the upper bound of the parley_push_lag_seconds bucket that holds the
// 99th percentile.
func lagP99Bucket(b *testing.B, n *node) float64 {
	r := n.call(b, "GET", "/metrics", "", nil)
	var les []float64
	var counts []float64
	sc := bufio.NewScanner(bytes.NewReader(r.raw))
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, `parley_push_lag_seconds_bucket{le="`)
		if !ok {
			continue
		}
		le, v, _ := strings.Cut(rest, `"} `)
		x, err1 := strconv.ParseFloat(le, 64)
		c, err2 := strconv.ParseFloat(v, 64)
		if err1 != nil || err2 != nil {
			continue // +Inf
		}
		les, counts = append(les, x), append(counts, c)
	}
	if len(counts) == 0 {
		return -1
	}
	total := counts[len(counts)-1]
	for i, c := range counts {
		if c >= 0.99*total {
			return les[i]
		}
	}
	return -1
}

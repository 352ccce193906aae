package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parleychat/parley/client"
)

// The reconnect scenario measures how a device that was away catches up. One user has
// Devices devices, all offline while Messages messages arrive from Convs peers (one direct
// conversation each). Then, every round:
//
//   - cursor sync: every device reconnects at once with the cursor it left with, and the
//     time until it holds every message (the server replays its log) is measured;
//   - snapshot sync: as many fresh devices take a snapshot and page the history back to the
//     conversation's start, and the time until they hold every message is measured.
//
// Both count the bytes that crossed the wire. It runs in the coordinator process only: its
// load is a few devices, and one runtime is no bottleneck for it.

// rdev is one of the user's devices.
type rdev struct {
	acct   Account
	label  string
	stream *Stream
	cursor int64 // where its last session ended
}

// syncResult is one device's catch-up.
type syncResult struct {
	took  time.Duration
	bytes int64
	msgs  int64
}

func (c *coord) runReconnect(ctx context.Context) (*Report, error) {
	cfg := c.cfg
	me := c.id("me", 0)
	peers := make([]string, cfg.Convs)
	for i := range peers {
		peers[i] = c.id("p", i)
	}
	if err := c.createUsers(ctx, append([]string{me}, peers...)); err != nil {
		return nil, err
	}
	peerAccts := accounts(peers, "d1")
	devAccts := make([]Account, cfg.Devices)
	for i := range devAccts {
		devAccts[i] = Account{User: me, Device: fmt.Sprintf("dev%d", i)}
	}
	all := append(peerAccts, devAccts...)
	if err := c.issueTokens(ctx, all); err != nil {
		return nil, err
	}
	peerAccts, devAccts = all[:len(peers)], all[len(peers):]
	convs := make([]client.ConversationBrief, cfg.Convs)
	err := parallel(ctx, cfg.Convs, setupConc, func(i int) error {
		var err error
		convs[i], err = c.as(peerAccts[i]).CreateDirect(ctx, me)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create direct conversation: %w", err)
	}
	ledger := NewLedger(c.v)
	for _, cv := range convs {
		ledger.Watch(cv.ConvID, cv.MaxSeq)
	}
	rec := newRecorder(c.interval())
	devs := make([]*rdev, cfg.Devices)
	c.note("connecting %d devices once to learn their cursors", cfg.Devices)
	for i, a := range devAccts {
		d := &rdev{acct: a, label: a.User + "/" + a.Device, stream: NewStream(c.v, me, a.User+"/"+a.Device)}
		for _, cv := range convs {
			d.stream.Watch(cv.ConvID, cv.MaxSeq)
		}
		if _, err := c.cursorSync(ctx, d, nil, rec); err != nil {
			return nil, err
		}
		devs[i] = d
	}

	cpu0, _ := cpuNow()
	at := time.Now()
	rec.begin(at)
	c.sampler.take(ctx)
	sendHist, snapHist := newHist(3), newHist(3)
	var mu sync.Mutex // guards sendHist, snapHist and the sums below
	var cursorBytes, snapBytes, snapMsgs int64
	var sendTime time.Duration
	for round := range cfg.Rounds {
		c.note("round %d: %d messages arrive while %d devices are offline", round+1, cfg.Messages, cfg.Devices)
		t0 := time.Now()
		err := parallel(ctx, cfg.Convs, cfg.Convs, func(i int) error {
			peer := c.recordedAs(peerAccts[i], rec)
			for n := share(cfg.Messages, cfg.Convs, i); n > 0; n-- {
				s0 := time.Now()
				octx, cancel := opContext(ctx)
				ack, err := peer.SendText(octx, convs[i].ConvID, fmt.Sprintf("m%d", n))
				cancel()
				now := time.Now()
				if err != nil {
					rec.fail(err)
					continue
				}
				rec.ack(now)
				ledger.Ack(peerAccts[i].User, ack)
				mu.Lock()
				_ = sendHist.RecordValue(micros(now.Sub(s0)))
				mu.Unlock()
			}
			return ctx.Err()
		})
		sendTime += time.Since(t0)
		if err != nil {
			return nil, err
		}
		targets := ledger.Max()

		c.note("round %d: %d devices reconnect from their cursors", round+1, cfg.Devices)
		err = parallel(ctx, len(devs), len(devs), func(i int) error {
			res, err := c.cursorSync(ctx, devs[i], targets, rec)
			if err != nil {
				return err
			}
			rec.op(time.Now(), res.took)
			mu.Lock()
			cursorBytes += res.bytes
			mu.Unlock()
			return nil
		})
		if err != nil {
			return nil, err
		}

		c.note("round %d: %d new devices sync from a snapshot", round+1, cfg.Devices)
		fresh := make([]Account, cfg.Devices)
		for i := range fresh {
			fresh[i] = Account{User: me, Device: fmt.Sprintf("snap%d-%d", round, i)}
		}
		if err := c.issueTokens(ctx, fresh); err != nil {
			return nil, err
		}
		acks := ledger.Summaries()
		err = parallel(ctx, len(fresh), len(fresh), func(i int) error {
			res, err := c.snapshotSync(ctx, fresh[i], acks)
			if err != nil {
				return err
			}
			mu.Lock()
			_ = snapHist.RecordValue(micros(res.took))
			snapBytes += res.bytes
			snapMsgs += res.msgs
			mu.Unlock()
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	end := time.Now()
	c.sampler.take(ctx)
	_, maxRSS := cpuNow()

	r := c.newReport("cursor sync (reconnect -> holds every message)", at, end)
	r.addResult(&Result{measures: rec.export(), CPUSeconds: cpuSince(cpu0), MaxRSS: maxRSS})
	var recvs []RecvSummary
	for _, d := range devs {
		recvs = append(recvs, d.stream.Summaries()...)
	}
	r.ExpectedDeliveries = Check(c.v, ledger.Summaries(), recvs)
	c.serverFigures(r, at, end)
	syncs := float64(cfg.Rounds * cfg.Devices)
	perMsg := float64(cfg.Messages)
	snap := percentiles(snapHist)
	send := percentiles(sendHist)
	r.Extra["messages_per_round"] = perMsg
	r.Extra["send_phase_s"] = sendTime.Seconds()
	if sendTime > 0 {
		r.Extra["send_acked_per_sec"] = float64(r.Acked) / sendTime.Seconds()
	}
	r.Extra["send_p50_ms"], r.Extra["send_p99_ms"] = send.P50, send.P99
	r.Extra["cursor_sync_p50_ms"], r.Extra["cursor_sync_max_ms"] = r.Latency.P50, r.Latency.Max
	r.Extra["cursor_sync_bytes_per_device"] = float64(cursorBytes) / syncs
	r.Extra["cursor_sync_bytes_per_message"] = float64(cursorBytes) / syncs / perMsg
	r.Extra["snapshot_sync_p50_ms"], r.Extra["snapshot_sync_max_ms"] = snap.P50, snap.Max
	r.Extra["snapshot_sync_bytes_per_device"] = float64(snapBytes) / syncs
	r.Extra["snapshot_messages_per_device"] = float64(snapMsgs) / syncs
	return r, nil
}

// cursorSync connects d from its cursor, waits until it holds targets (nil: just connect)
// and disconnects, measuring the time and the bytes on the wire.
func (c *coord) cursorSync(ctx context.Context, d *rdev, targets map[string]int64, rec *recorder) (syncResult, error) {
	var n atomic.Int64
	hc := newHTTPClient(4, &n)
	defer hc.CloseIdleConnections()
	t0 := time.Now()
	cl := client.New(client.Options{
		BaseURL: c.nodeURL(d.acct), Token: d.acct.Token, UserID: d.acct.User, HTTPClient: hc, Cursor: d.cursor,
		OnReset: func(s client.SyncSnapshot) { d.stream.Reset(s.Cursor) },
		OnEvent: func(ev client.SyncEvent) {
			if h := c.hooks().DropEvent; h != nil && h(d.acct.User, d.label, ev) {
				return
			}
			if _, ok := d.stream.Event(ev); ok {
				rec.deliver(time.Now(), -1) // sent while the device was away: no latency to speak of
			}
		},
	})
	if err := cl.Connect(ctx); err != nil {
		return syncResult{}, fmt.Errorf("connect %s: %w", d.label, err)
	}
	if targets != nil {
		deadline := time.NewTimer(c.cfg.DrainTimeout)
	wait:
		for {
			ok, ch := d.stream.Caught(targets)
			if ok {
				break
			}
			select {
			case <-ch:
			case <-deadline.C:
				break wait // Check reports what is missing
			case <-ctx.Done():
				break wait
			}
		}
		deadline.Stop()
	}
	took := time.Since(t0)
	if err := cl.Close(); err != nil {
		rec.fail(err)
	}
	d.cursor = cl.Cursor()
	return syncResult{took: took, bytes: n.Load()}, nil
}

// snapshotSync is a new device of the user catching up: a snapshot with the latest 100
// messages of each conversation, then history pages back to each conversation's start. It
// checks that the device ends up with exactly the acked messages.
func (c *coord) snapshotSync(ctx context.Context, a Account, acks map[string]*AckSummary) (syncResult, error) {
	var n atomic.Int64
	hc := newHTTPClient(4, &n)
	defer hc.CloseIdleConnections()
	label := a.User + "/" + a.Device
	cl := client.New(client.Options{BaseURL: c.nodeURL(a), Token: a.Token, UserID: a.User, HTTPClient: hc})
	t0 := time.Now()
	snap, err := cl.Snapshot(ctx, 100)
	if err != nil {
		return syncResult{}, fmt.Errorf("snapshot %s: %w", label, err)
	}
	held := map[string]map[int64]string{} // conv -> seq -> msg_id
	add := func(ms []client.Message) {
		for _, m := range ms {
			if held[m.ConvID] == nil {
				held[m.ConvID] = map[int64]string{}
			}
			held[m.ConvID][m.Seq] = m.MsgID
		}
	}
	for conv, ms := range snap.Messages {
		for i := range ms {
			if ms[i].ConvID == "" {
				ms[i].ConvID = conv
			}
		}
		add(ms)
	}
	for conv, want := range acks {
		lowest := want.Max + 1
		for seq := range held[conv] {
			lowest = min(lowest, seq)
		}
		for lowest > want.Base+1 {
			page, err := cl.History(ctx, conv, client.HistoryQuery{BeforeSeq: lowest, Limit: 200})
			if err != nil {
				return syncResult{}, fmt.Errorf("history %s: %w", label, err)
			}
			if len(page.Messages) == 0 {
				break
			}
			for i := range page.Messages {
				page.Messages[i].ConvID = conv
			}
			add(page.Messages)
			if page.Messages[0].Seq >= lowest {
				c.v.Reportf(VBadPage, label, conv, "history before seq %d started at seq %d", lowest, page.Messages[0].Seq)
				break
			}
			lowest = page.Messages[0].Seq
			if !page.HasMore {
				break
			}
		}
	}
	took := time.Since(t0)
	var count int64
	for conv, want := range acks {
		got := held[conv]
		var dg uint64
		var missing int64
		for seq := want.Base + 1; seq <= want.Max; seq++ {
			id, ok := got[seq]
			if !ok {
				missing++
				continue
			}
			dg ^= digest(seq, id)
		}
		count += int64(len(got))
		switch {
		case missing > 0:
			c.v.Reportf(VMissing, label, conv, "snapshot sync holds %d of the %d messages up to seq %d", want.Max-want.Base-missing, want.Max-want.Base, want.Max)
		case want.Count == want.Max-want.Base && dg != want.Digest:
			c.v.Reportf(VMismatch, label, conv, "snapshot sync holds other messages than those acked")
		}
	}
	return syncResult{took: took, bytes: n.Load(), msgs: count}, nil
}

func (c *coord) hooks() *Hooks {
	if c.opts.Hooks == nil {
		return &Hooks{}
	}
	return c.opts.Hooks
}

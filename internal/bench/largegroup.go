package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/protocol"
)

// The coordinator's side of the large-group scenarios (issue 9): a group of --members in
// read fanout, built through the API as a client would, and connections dealt to workers.
//
//   - largegroup: --online members connected, --open of them with the group open, --senders
//     of those sending at --rate in all; beside them (--compare-direct) a user outside the
//     group sends into a direct conversation at one sender's rate, on the same schedule, so
//     the ack latencies of a 100,000-member group and of a 2-member conversation compare
//     within one run.
//   - readstorm: a message in the group, then --online members mark it read at once on
//     their WebSockets; storage commits per read and the time until the sender is pushed
//     the final read count.
//   - broadcast: every member connected with the group open, one sender paced by delivery;
//     with --baseline, broadcast-naive runs the same load against a bare broadcast server.

// memberBatch is how many members one call adds (docs/protocol.md 5.5: a list holds at most
// 1,000 entries).
const memberBatch = protocol.MaxRequestListLen

// setupTimes are the setup's phases, reported with the figures: building a 100,000-member
// group must take minutes at most.
type setupTimes struct {
	users, members    time.Duration
	firstAdd, lastAdd time.Duration // the first and the last batch of members added
}

func (t setupTimes) addTo(r *Report) {
	r.Extra["setup_users_s"] = t.users.Seconds()
	r.Extra["setup_members_s"] = t.members.Seconds()
	r.Extra["setup_add_first_batch_ms"] = msOf(t.firstAdd)
	r.Extra["setup_add_last_batch_ms"] = msOf(t.lastAdd)
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// buildGroup creates the users of a group of members (the first is its owner) and the group
// itself, filled in batches, and checks that it ended in read fanout.
func (c *coord) buildGroup(ctx context.Context, members []string, owner Account, extraUsers ...string) (client.ConversationBrief, setupTimes, error) {
	var st setupTimes
	t0 := time.Now()
	if err := c.createUsers(ctx, append(slices.Clone(members), extraUsers...)); err != nil {
		return client.ConversationBrief{}, st, err
	}
	st.users = time.Since(t0)
	if owner.Token == "" {
		tok := []Account{owner}
		if err := c.issueTokens(ctx, tok); err != nil {
			return client.ConversationBrief{}, st, err
		}
		owner = tok[0]
	}
	t0 = time.Now()
	first := members[1:min(len(members), memberBatch)]
	conv, err := c.as(owner).CreateGroup(ctx, "bench "+c.runID, first, false)
	if err != nil {
		return conv, st, fmt.Errorf("create group: %w", err)
	}
	rest := members[1+len(first):]
	if len(rest) > 0 {
		c.note("adding %d members in batches of %d", len(rest), memberBatch)
	}
	for i := 0; i < len(rest); i += memberBatch {
		b0 := time.Now()
		conv, err = c.as(owner).UpdateMembers(ctx, conv.ConvID, rest[i:min(i+memberBatch, len(rest))], nil)
		if err != nil {
			return conv, st, fmt.Errorf("add members %d..: %w", 1+len(first)+i, err)
		}
		d := time.Since(b0)
		if i == 0 {
			st.firstAdd = d
		}
		st.lastAdd = d
	}
	st.members = time.Since(t0)
	if conv.MembersCount != len(members) || conv.Fanout != "read" || conv.MaxSeq != 0 {
		return conv, st, fmt.Errorf("group %s has %d members, fanout %q, max_seq %d: want %d, read, 0 (start the server with --write-fanout-max below the group's size)",
			conv.ConvID, conv.MembersCount, conv.Fanout, conv.MaxSeq, len(members))
	}
	c.note("group %s: %d members in %.1f s (users %.1f s; members added in %.1f s, the first batch %.0f ms, the last %.0f ms)",
		conv.ConvID, len(members), (st.users + st.members).Seconds(), st.users.Seconds(), st.members.Seconds(), msOf(st.firstAdd), msOf(st.lastAdd))
	return conv, st, nil
}

// roomJobs returns one empty room job per worker.
func (c *coord) roomJobs(conv string) []*Job {
	jobs := c.baseJobs()
	for _, j := range jobs {
		j.Room = &RoomJob{Conv: conv, Members: c.cfg.Members, Window: c.cfg.Window}
	}
	return jobs
}

// deal gives connection i to a worker in turn.
func deal(jobs []*Job, i int, rc RoomConn) {
	jobs[i%len(jobs)].Room.Conns = append(jobs[i%len(jobs)].Room.Conns, rc)
}

// memberIDs names the members of this run's group.
func (c *coord) memberIDs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = c.id("m", i)
	}
	return out
}

func (c *coord) setupLargeGroup(ctx context.Context) (*plan, error) {
	cfg := c.cfg
	members := c.memberIDs(cfg.Members)
	online := accounts(members[:cfg.Online], "d1")
	var pair []string // the direct conversation's sender and peer, not in the group
	if cfg.CompareDirect {
		pair = []string{c.id("dsend", 0), c.id("peer", 0)}
	}
	conv, st, err := c.buildGroup(ctx, members, online[0], pair...)
	if err != nil {
		return nil, err
	}
	online = append(online, accounts(pair, "d1")...)
	c.note("minting %d device tokens", len(online))
	if err := c.issueTokens(ctx, online); err != nil {
		return nil, err
	}
	jobs := c.roomJobs(conv.ConvID)
	var direct string
	if cfg.CompareDirect {
		d, err := c.as(online[cfg.Online]).CreateDirect(ctx, pair[1])
		if err != nil {
			return nil, fmt.Errorf("create direct conversation: %w", err)
		}
		direct = d.ConvID
	}
	for i := range cfg.Online {
		rc := RoomConn{Account: online[i], Open: i < cfg.Open}
		if i < cfg.Senders {
			rc.Send, rc.Rate, rc.Quota = true, cfg.Rate/float64(cfg.Senders), quota(cfg.Messages, cfg.Senders, i)
		}
		rc.Type = i >= cfg.Online-cfg.Typers // the last online members: not senders, mostly without the group open

		deal(jobs, i, rc)
	}
	if cfg.CompareDirect {
		deal(jobs, 0, RoomConn{Account: online[cfg.Online], SendDirect: true, Direct: direct,
			Rate: cfg.Rate / float64(cfg.Senders), Quota: quota(cfg.Messages, cfg.Senders, 0)})
		deal(jobs, 1, RoomConn{Account: online[cfg.Online+1], Peer: true, Direct: direct})
	}
	p := &plan{jobs: jobs, opName: "group send -> ack"}
	p.finish = func(r *Report) {
		st.addTo(r)
		r.Extra["dropped"] = float64(r.Counts["dropped"])
		pct(r, "push_latency", "push")
		pct(r, "notice_latency", "notice")
		pct(r, "notice_gap", "notice_gap")
		if h := r.named["notice_gap"]; h != nil && h.TotalCount() > 0 {
			r.Extra["notice_gap_min_ms"] = float64(h.Min()) / 1000
		}
		if exp := r.Counts["notice_expected"]; exp > 0 {
			r.Extra["notice_within_1500ms_fraction"] = float64(r.Counts["notice_within_1500ms"]) / float64(exp)
		}
		if h := r.named["notice_rate_milli"]; h != nil && h.TotalCount() > 0 {
			r.Extra["notices_per_conn_per_sec_mean"] = h.Mean() / 1000
			r.Extra["notices_per_conn_per_sec_max"] = float64(r.maxes["notice_rate_max_milli"]) / 1000
		}
		if v, ok := r.maxes["notice_pull_delay_max_ms"]; ok {
			r.Extra["notice_pull_delay_max_ms"] = float64(v)
		}
		r.Extra["send_ack_p50_ms"], r.Extra["send_ack_p99_ms"] = r.Latency.P50, r.Latency.P99
		typingFigures(r)
		if d := pct(r, "direct_ack", "direct_ack"); d.Count > 0 && d.P99 > 0 && d.P50 > 0 {
			r.Extra["group_over_direct_ack_p50"] = r.Latency.P50 / d.P50
			r.Extra["group_over_direct_ack_p99"] = r.Latency.P99 / d.P99
		}
	}
	return p, nil
}

// pct puts the p50, p99 and max of the named distribution into the report's figures as
// <prefix>_p50_ms etc., and returns them.
func pct(r *Report, prefix, name string) Percentiles {
	p := percentiles(r.namedHist(name))
	if p.Count > 0 {
		r.Extra[prefix+"_p50_ms"] = p.P50
		r.Extra[prefix+"_p99_ms"] = p.P99
		r.Extra[prefix+"_max_ms"] = p.Max
		r.Extra[prefix+"_count"] = float64(p.Count)
	}
	return p
}

// namedHist returns the merged distribution name, or nil.
func (r *Report) namedHist(name string) *hdrhistogram.Histogram { return r.named[name] }

func (c *coord) setupReadstorm(ctx context.Context) (*plan, error) {
	cfg := c.cfg
	members := c.memberIDs(cfg.Members)
	sender := Account{User: members[0], Device: "d1"}
	conv, st, err := c.buildGroup(ctx, members, sender)
	if err != nil {
		return nil, err
	}
	readers := accounts(members[1:1+cfg.Online], "d1")
	c.note("minting %d device tokens", len(readers)+1)
	all := append([]Account{sender}, readers...)
	if err := c.issueTokens(ctx, all); err != nil {
		return nil, err
	}
	sender = all[0]
	content := (&worker{job: &Job{Size: cfg.Size}}).content(time.Now())
	ack, err := c.as(sender).Send(ctx, conv.ConvID, client.ContentText, content, nil)
	if err != nil {
		return nil, fmt.Errorf("send the message to read: %w", err)
	}
	jobs := c.roomJobs(conv.ConvID)
	for _, j := range jobs {
		j.Room.ReadSeq, j.Room.Readers = ack.Seq, cfg.Online
	}
	deal(jobs, 0, RoomConn{Account: sender, Receipts: true})
	for i, a := range all[1:] {
		deal(jobs, i+1, RoomConn{Account: a, Read: true})
	}
	var before, after metricSet
	p := &plan{jobs: jobs, opName: "read"}
	p.beforeLoad = func(ctx context.Context) { before = c.sampler.take(ctx) }
	p.afterLoad = func(ctx context.Context) { after = c.sampler.take(ctx) }
	p.finish = func(r *Report) {
		st.addTo(r)
		r.Extra["dropped"] = float64(r.Counts["dropped"])
		r.Extra["reads"] = float64(r.Ops)
		at := r.StartedAt.UnixNano()
		last, okLast := r.maxes["last_read_unix_ns"]
		final, okFinal := r.maxes["receipts_final_unix_ns"]
		if okLast {
			r.Extra["storm_ms"] = msOf(time.Duration(last - at))
		}
		if okFinal {
			r.Extra["receipts_final_ms"] = msOf(time.Duration(final - at))
			r.Extra["receipts_final_count"] = float64(r.maxes["receipts_final_count"])
		} else {
			r.Extra["receipts_final_missing"] = 1
			c.v.Reportf(VMissing, sender.User+"/"+sender.Device, conv.ConvID, "no receipts push showed %d reads of seq %d", cfg.Online, ack.Seq)
		}
		if okLast && okFinal {
			r.Extra["receipts_after_last_read_ms"] = msOf(time.Duration(final - last))
		}
		if before == nil || after == nil {
			return
		}
		commits := after[mCommitCount] - before[mCommitCount]
		r.Extra["store_commits"] = commits
		r.Extra["store_commit_ops"] = after[mCommitSum] - before[mCommitSum]
		if r.Ops > 0 {
			r.Extra["commits_per_read"] = commits / float64(r.Ops)
			r.Extra["reads_per_commit"] = float64(r.Ops) / max(commits, 1)
		}
	}
	return p, nil
}

func (c *coord) setupBroadcast(ctx context.Context) (*plan, error) {
	cfg := c.cfg
	members := c.memberIDs(cfg.Members)
	online := accounts(members, "d1")
	conv, st, err := c.buildGroup(ctx, members, online[0])
	if err != nil {
		return nil, err
	}
	c.note("minting %d device tokens", len(online))
	if err := c.issueTokens(ctx, online); err != nil {
		return nil, err
	}
	jobs := c.roomJobs(conv.ConvID)
	for i, a := range online {
		deal(jobs, i, RoomConn{Account: a, Open: true, Send: i == 0, Quota: quota(cfg.Messages, 1, 0)})
	}
	p := &plan{jobs: jobs, opName: "send -> ack"}
	p.finish = func(r *Report) {
		st.addTo(r)
		broadcastFigures(r)
	}
	return p, nil
}

// setupNaiveBroadcast: as broadcast, against the baseline server: no users, no group, the
// same connections and the same sender.
func (c *coord) setupNaiveBroadcast(context.Context) (*plan, error) {
	cfg := c.cfg
	jobs := c.roomJobs(echoConvID(0))
	for _, j := range jobs {
		j.Room.Naive = true
	}
	for i := range cfg.Members {
		a := Account{User: c.id("m", i), Device: "d1"}
		deal(jobs, i, RoomConn{Account: a, Open: true, Send: i == 0, Quota: quota(cfg.Messages, 1, 0)})
	}
	p := &plan{jobs: jobs, opName: "broadcast round trip"}
	p.finish = broadcastFigures
	return p, nil
}

func broadcastFigures(r *Report) {
	r.Extra["dropped"] = float64(r.Counts["dropped"])
	r.Extra["messages_per_sec"] = r.AckedPerSec
	pct(r, "push_latency", "push")
}

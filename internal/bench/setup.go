package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"time"

	"github.com/parleychat/parley/client"
)

// plan is a scenario ready to run: the workers' jobs plus what the report needs to know.
type plan struct {
	jobs   []*Job
	opName string        // what the main latency measures
	hold   time.Duration // idle: how long the connections are held after opening
	// Optional steps: just before the start signal; once every worker has finished its load;
	// shortly before the hold ends; and adding the scenario's figures to the report.
	beforeLoad func(ctx context.Context)
	afterLoad  func(ctx context.Context)
	endOfHold  func(ctx context.Context)
	finish     func(r *Report)
}

// setupConc is how many setup calls (users, tokens, conversations) run at once.
const setupConc = 32

// id names a user of this run: runs against the same server never share users, so every
// run starts on fresh conversations.
func (c *coord) id(role string, i int) string {
	return "bench-" + c.runID + "-" + role + strconv.Itoa(i)
}

func newRunID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	var b [6]byte
	_, _ = rand.Read(b[:])
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b[:])
}

// createUsers creates the users through the admin API.
func (c *coord) createUsers(ctx context.Context, ids []string) error {
	c.note("creating %d users", len(ids))
	return parallel(ctx, len(ids), setupConc, func(i int) error {
		_, _, err := c.admin.CreateUser(ctx, ids[i], "")
		if err != nil {
			return fmt.Errorf("create user %s: %w", ids[i], err)
		}
		return nil
	})
}

// issueTokens gives every (user, device) its node and mints its token.
func (c *coord) issueTokens(ctx context.Context, accts []Account) error {
	c.spread.assign(accts)
	return parallel(ctx, len(accts), setupConc, func(i int) error {
		tok, err := c.admin.IssueToken(ctx, accts[i].User, accts[i].Device, 24*time.Hour)
		if err != nil {
			return fmt.Errorf("token for %s/%s: %w", accts[i].User, accts[i].Device, err)
		}
		accts[i].Token = tok.Token
		return nil
	})
}

// as returns a client acting as acct (HTTP only) for setup calls.
func (c *coord) as(acct Account) *client.Client { return c.recordedAs(acct, nil) }

// recordedAs is as for calls that are part of the load: rec, if not nil, counts the SDK's
// retries.
func (c *coord) recordedAs(acct Account, rec *recorder) *client.Client {
	o := client.Options{BaseURL: c.nodeURL(acct), Token: acct.Token, UserID: acct.User, HTTPClient: c.hc}
	if rec != nil {
		o.OnRetry = rec.retry
	}
	return client.New(o)
}

// baseJobs returns one empty job per worker.
func (c *coord) baseJobs() []*Job {
	jobs := make([]*Job, c.cfg.Procs)
	for i := range jobs {
		jobs[i] = &Job{
			Scenario: c.cfg.Scenario, Worker: i, Server: c.base, Duration: c.cfg.Duration,
			Interval: c.interval(), Size: c.cfg.Size, DrainTimeout: c.cfg.DrainTimeout,
			Heartbeat: c.cfg.Heartbeat, Repeat: c.cfg.Repeat,
		}
		if len(c.nodes) > 1 {
			jobs[i].Nodes = c.nodes
			jobs[i].Resync = c.cfg.Bus == ""
			jobs[i].Failover = c.cfg.KillNodeAfter > 0
		}
	}
	return jobs
}

// nodeURL returns the base URL of the node acct's device connects to.
func (c *coord) nodeURL(acct Account) string {
	if acct.Node > 0 && acct.Node < len(c.nodes) {
		return c.nodes[acct.Node]
	}
	return c.base
}

// interval is the chart's time slot: a second, or longer for long runs (~300 slots at most).
func (c *coord) interval() time.Duration {
	return max(time.Second, (c.cfg.Duration / 300).Truncate(time.Second))
}

// share splits total into n parts differing by at most one; part i is returned.
func share(total int64, n, i int) int64 {
	q := total / int64(n)
	if int64(i) < total%int64(n) {
		q++
	}
	return q
}

// quota is share as a job's limit, where 0 means "no limit": a total of 0 gives 0, and an
// empty share of a real total gives -1 ("nothing to do").
func quota(total int64, n, i int) int64 {
	if total <= 0 {
		return 0
	}
	if q := share(total, n, i); q > 0 {
		return q
	}
	return -1
}

func accounts(users []string, device string) []Account {
	out := make([]Account, len(users))
	for i, u := range users {
		out[i] = Account{User: u, Device: device}
	}
	return out
}

// setupDirect: pair i is users a<i> (sender) and b<i> (receiver) in a direct conversation,
// both online; pairs are dealt to workers in turn.
func (c *coord) setupDirect(ctx context.Context) (*plan, error) {
	n := c.cfg.Pairs
	var users []string
	for i := range n {
		users = append(users, c.id("a", i), c.id("b", i))
	}
	if err := c.createUsers(ctx, users); err != nil {
		return nil, err
	}
	accts := accounts(users, "d1")
	if err := c.issueTokens(ctx, accts); err != nil {
		return nil, err
	}
	c.note("creating %d direct conversations", n)
	convs := make([]client.ConversationBrief, n)
	err := parallel(ctx, n, setupConc, func(i int) error {
		var err error
		convs[i], err = c.as(accts[2*i]).CreateDirect(ctx, accts[2*i+1].User)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create direct conversation: %w", err)
	}
	jobs := c.baseJobs()
	for i := range n {
		j := jobs[i%len(jobs)]
		cv := map[string]int64{convs[i].ConvID: convs[i].MaxSeq}
		j.Devices = append(j.Devices,
			DeviceSpec{Account: accts[2*i], Convs: cv, Online: true},
			DeviceSpec{Account: accts[2*i+1], Convs: cv, Online: true})
		j.Senders = append(j.Senders, SenderSpec{
			Device: len(j.Devices) - 2, Conv: convs[i].ConvID,
			Quota: quota(c.cfg.Messages, n, i), Rate: c.cfg.Rate / float64(n),
		})
	}
	p := &plan{jobs: jobs, opName: "send -> ack"}
	if c.cfg.KillNodeAfter > 0 {
		p.finish = func(r *Report) { pct(r, "killnode_catchup", "killnode_catchup") }
	}
	return p, nil
}

// setupGroup: one group of Members; the first Online members are connected and the first
// Senders of them send.
func (c *coord) setupGroup(ctx context.Context) (*plan, error) {
	g := c.cfg.Members
	users := make([]string, g)
	for i := range users {
		users[i] = c.id("m", i)
	}
	if err := c.createUsers(ctx, users); err != nil {
		return nil, err
	}
	accts := accounts(users[:c.cfg.Online], "d1")
	if err := c.issueTokens(ctx, accts); err != nil {
		return nil, err
	}
	conv, err := c.as(accts[0]).CreateGroup(ctx, "bench "+c.runID, users[1:], false)
	if err != nil {
		return nil, fmt.Errorf("create group: %w", err)
	}
	jobs := c.baseJobs()
	cv := map[string]int64{conv.ConvID: conv.MaxSeq}
	for i, a := range accts {
		j := jobs[i%len(jobs)]
		j.Devices = append(j.Devices, DeviceSpec{Account: a, Convs: cv, Online: true})
		if i < c.cfg.Senders {
			j.Senders = append(j.Senders, SenderSpec{
				Device: len(j.Devices) - 1, Conv: conv.ConvID,
				Quota: quota(c.cfg.Messages, c.cfg.Senders, i), Rate: c.cfg.Rate / float64(c.cfg.Senders),
			})
		}
	}
	return &plan{jobs: jobs, opName: "send -> ack"}, nil
}

// setupReadStorm: one group of Members, all reading; the first Online are also connected.
// Each worker's first member posts the message of each of its rounds.
func (c *coord) setupReadStorm(ctx context.Context) (*plan, error) {
	g := c.cfg.Members
	users := make([]string, g)
	for i := range users {
		users[i] = c.id("m", i)
	}
	if err := c.createUsers(ctx, users); err != nil {
		return nil, err
	}
	accts := accounts(users, "d1")
	if err := c.issueTokens(ctx, accts); err != nil {
		return nil, err
	}
	conv, err := c.as(accts[0]).CreateGroup(ctx, "bench "+c.runID, users[1:], false)
	if err != nil {
		return nil, fmt.Errorf("create group: %w", err)
	}
	jobs := c.baseJobs()
	cv := map[string]int64{conv.ConvID: conv.MaxSeq}
	for i, a := range accts {
		j := jobs[i%len(jobs)]
		j.Conv = conv.ConvID
		j.Devices = append(j.Devices, DeviceSpec{Account: a, Convs: cv, Online: i < c.cfg.Online})
	}
	for i, j := range jobs {
		j.Quota = quota(c.cfg.Messages, len(jobs), i)
	}
	var before metricSet
	var after metricSet
	p := &plan{jobs: jobs, opName: "read"}
	p.beforeLoad = func(ctx context.Context) { before = c.sampler.take(ctx) }
	p.afterLoad = func(ctx context.Context) { after = c.sampler.take(ctx) }
	p.finish = func(r *Report) {
		if before == nil || after == nil {
			return
		}
		reads := float64(r.Ops)
		r.Extra["reads"] = reads
		r.Extra["reads_per_sec"] = r.OpsPerSec
		r.Extra["rounds"] = float64(r.Counts["rounds"])
		commits := after[mCommitCount] - before[mCommitCount]
		r.Extra["store_commits"] = commits
		r.Extra["store_commit_ops"] = after[mCommitSum] - before[mCommitSum]
		r.Extra["events_committed"] = after[mEvents] - before[mEvents]
		if reads > 0 {
			r.Extra["commits_per_read"] = commits / reads
			r.Extra["commits_per_1000_reads"] = 1000 * commits / reads
			// Each round's message costs commits of its own; what is left is the reads'.
			r.Extra["read_commits_per_read"] = max(commits-float64(r.Counts["rounds"]), 0) / reads
		}
		for k, v := range after {
			if len(k) > len("parley_store_") && k[:len("parley_store_")] == "parley_store_" && (hasSuffix(k, "_total") || hasSuffix(k, "_count") || hasSuffix(k, "_sum")) {
				r.Extra["delta_"+k] = v - before[k]
			}
		}
	}
	return p, nil
}

func hasSuffix(s, suf string) bool { return len(s) >= len(suf) && s[len(s)-len(suf):] == suf }

// mixedCluster is how many users share a group in the mixed scenario.
const mixedCluster = 10

// setupMixed: users in clusters of up to ten, each cluster with a group of all of them and
// direct conversations between neighbours (0-1, 2-3, ...). Clusters are dealt to workers.
func (c *coord) setupMixed(ctx context.Context) (*plan, error) {
	u := c.cfg.Users
	users := make([]string, u)
	for i := range users {
		users[i] = c.id("u", i)
	}
	if err := c.createUsers(ctx, users); err != nil {
		return nil, err
	}
	accts := accounts(users, "d1")
	if err := c.issueTokens(ctx, accts); err != nil {
		return nil, err
	}
	var clusters [][2]int // [from, to)
	for from := 0; from < u; {
		to := min(from+mixedCluster, u)
		if u-to < 2 {
			to = u // a last cluster of one user joins this one
		}
		clusters = append(clusters, [2]int{from, to})
		from = to
	}
	c.note("creating %d groups and their direct conversations", len(clusters))
	convs := make([]map[string]int64, u)
	for i := range convs {
		convs[i] = map[string]int64{}
	}
	err := parallel(ctx, len(clusters), setupConc, func(k int) error {
		from, to := clusters[k][0], clusters[k][1]
		g, err := c.as(accts[from]).CreateGroup(ctx, "bench "+c.runID, users[from+1:to], false)
		if err != nil {
			return fmt.Errorf("create group: %w", err)
		}
		for i := from; i < to; i++ {
			convs[i][g.ConvID] = g.MaxSeq
		}
		for i := from; i+1 < to; i += 2 {
			d, err := c.as(accts[i]).CreateDirect(ctx, users[i+1])
			if err != nil {
				return fmt.Errorf("create direct conversation: %w", err)
			}
			convs[i][d.ConvID], convs[i+1][d.ConvID] = d.MaxSeq, d.MaxSeq
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	jobs := c.baseJobs()
	for k, cl := range clusters {
		j := jobs[k%len(jobs)]
		for i := cl[0]; i < cl[1]; i++ {
			j.Devices = append(j.Devices, DeviceSpec{Account: accts[i], Convs: convs[i], Online: true})
		}
	}
	for i, j := range jobs {
		j.Rate = c.cfg.Rate * float64(len(j.Devices)) / float64(u)
		j.Quota = quota(c.cfg.Messages, len(jobs), i)
	}
	return &plan{jobs: jobs, opName: "action"}, nil
}

// setupIdle: Conns devices, ten per user; the connections are dealt to workers in blocks.
func (c *coord) setupIdle(ctx context.Context) (*plan, error) {
	n := c.cfg.Conns
	const perUser = 10
	users := make([]string, (n+perUser-1)/perUser)
	for i := range users {
		users[i] = c.id("i", i)
	}
	if err := c.createUsers(ctx, users); err != nil {
		return nil, err
	}
	accts := make([]Account, n)
	for i := range accts {
		accts[i] = Account{User: users[i/perUser], Device: "c" + strconv.Itoa(i%perUser)}
	}
	c.note("minting %d device tokens", n)
	if err := c.issueTokens(ctx, accts); err != nil {
		return nil, err
	}
	jobs := c.baseJobs()
	for i, j := range jobs {
		from, to := i*n/len(jobs), (i+1)*n/len(jobs)
		j.Conns = accts[from:to]
		j.Duration = 0
	}
	var before, opened, held metricSet
	var openedAt, heldAt time.Time
	p := &plan{jobs: jobs, opName: "ws handshake", hold: c.cfg.Duration}
	p.beforeLoad = func(ctx context.Context) { before = c.sampler.take(ctx) }
	p.afterLoad = func(ctx context.Context) { opened, openedAt = c.sampler.take(ctx), time.Now() }
	p.endOfHold = func(ctx context.Context) { held, heldAt = c.sampler.take(ctx), time.Now() }
	p.finish = func(r *Report) {
		r.Extra["conns_opened"] = float64(r.Ops)
		r.Extra["conns_per_sec"] = r.OpsPerSec
		r.Extra["dropped"] = float64(r.Counts["dropped"])
		r.Extra["heartbeats"] = float64(r.Counts["heartbeats"])
		if before == nil || opened == nil {
			return
		}
		r.Extra["server_rss_before_bytes"] = before[mRSS]
		r.Extra["server_rss_opened_bytes"] = opened[mRSS]
		last := opened
		if held != nil {
			last = held
			r.Extra["server_rss_held_bytes"] = held[mRSS]
			r.Extra["hold_s"] = heldAt.Sub(openedAt).Seconds()
		}
		if _, ok := last[mWSConns]; ok {
			r.Extra["server_ws_connections"] = last[mWSConns]
		}
		if r.Ops > 0 {
			// RSS, and the Go heap and stacks apart: RSS holds the heap's uncollected
			// garbage too, up to the collector's goal, which is about twice the live heap.
			r.Extra["server_rss_per_conn_bytes"] = (last[mRSS] - before[mRSS]) / float64(r.Ops)
			for k, m := range map[string]string{"server_heap_inuse_per_conn_bytes": mHeapInuse, "server_stack_per_conn_bytes": mStackInuse} {
				if _, ok := last[m]; ok {
					r.Extra[k] = (last[m] - before[m]) / float64(r.Ops)
				}
			}
		}
	}
	return p, nil
}

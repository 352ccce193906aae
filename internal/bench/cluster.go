package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// A run may drive several nodes: a --server list, or a cluster the bench starts itself
// (--cluster N): N `parley serve` processes on one PostgreSQL schema of their own, created
// for the run and dropped at its end. Every device (sender, receiver, connection) is given
// one node at random from a seeded generator, so that a run is reproducible and, in direct,
// a sender and its receiver are usually on different nodes. The admin setup goes through
// the first node.

// DefaultPostgresURL is the database --cluster uses when none is given: the maintenance
// database of a local server with trust authentication. The bench's tables live in a schema
// of their own there, dropped at the end of each run.
const DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// ParseServers splits a --server value, "URL1,URL2,...", into base URLs without a trailing
// slash; each must be an http or https URL with a host.
func ParseServers(list string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimRight(strings.TrimSpace(f), "/")
		if f == "" {
			continue
		}
		u, err := url.Parse(f)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("--server: %q is not an http(s)://host:port URL", f)
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		return nil, errors.New("--server: no URL given")
	}
	return out, nil
}

// spreader deals devices to nodes at random, reproducibly for a seed, and counts them.
type spreader struct {
	mu     sync.Mutex // guards rng and counts
	rng    *rand.Rand
	counts []int
}

func newSpreader(seed uint64, nodes int) *spreader {
	return &spreader{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), counts: make([]int, max(nodes, 1))}
}

// assign gives every account a node.
func (s *spreader) assign(accts []Account) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range accts {
		n := 0
		if len(s.counts) > 1 {
			n = s.rng.IntN(len(s.counts))
		}
		accts[i].Node = n
		s.counts[n]++
	}
}

// perNode returns how many devices each node was given.
func (s *spreader) perNode() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.counts...)
}

// Topology is how a run was laid out: the nodes it drove, the store and bus they share (as
// far as the bench knows: it knows them for a cluster it started), and how the devices were
// spread over them.
type Topology struct {
	Nodes          []string `json:"nodes"`
	Store          string   `json:"store,omitempty"`  // "postgres" for --cluster; unknown for a --server list
	Bus            string   `json:"bus,omitempty"`    // the nodes' bus, if any
	Schema         string   `json:"schema,omitempty"` // --cluster: the run's PostgreSQL schema (dropped)
	Seed           uint64   `json:"seed"`
	DevicesPerNode []int    `json:"devices_per_node"`
	KilledNode     *int     `json:"killed_node,omitempty"` // --kill-node-after: the node killed (index into Nodes)
}

// String sums the topology up in one line.
func (t *Topology) String() string {
	s := fmt.Sprintf("%d nodes, devices per node %v, seed %d", len(t.Nodes), t.DevicesPerNode, t.Seed)
	if t.Store != "" {
		s += ", store " + t.Store
		if t.Schema != "" {
			s += " (schema " + t.Schema + ")"
		}
	}
	if t.Bus != "" {
		s += ", bus " + t.Bus
	} else {
		s += ", no bus"
	}
	if t.KilledNode != nil {
		s += fmt.Sprintf(", node %d killed", *t.KilledNode)
	}
	return s
}

// cluster is the nodes the bench started on a PostgreSQL schema of their own.
type cluster struct {
	nodes  []*localServer
	secret string
	base   string // the database URL given
	schema string
	blobs  string // the directory of the nodes' shared blob store

	pgMu sync.Mutex // guards pg
	pg   *pgx.Conn  // the bench's own connection: creates and drops the schema, reads statistics
}

// startCluster creates a fresh schema in cfg.PostgresURL's database and starts cfg.Cluster
// nodes on it with one admin secret: the first alone (it creates the tables), then the
// others. On failure everything started is stopped and the schema dropped.
func startCluster(ctx context.Context, cfg Config, opts Options, extra []string, stderr io.Writer) (*cluster, error) {
	conn, err := pgx.Connect(ctx, cfg.PostgresURL)
	if err != nil {
		return nil, fmt.Errorf("--cluster: connect to PostgreSQL (--postgres-url): %w", err)
	}
	cl := &cluster{secret: newSecret(), base: cfg.PostgresURL, schema: "bench_" + newRunID(), pg: conn}
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{cl.schema}.Sanitize()); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("--cluster: create schema %s: %w", cl.schema, err)
	}
	nodeURL, err := withSearchPath(cfg.PostgresURL, cl.schema)
	if err != nil {
		cl.Stop()
		return nil, err
	}
	if cl.blobs, err = os.MkdirTemp("", "parley-bench-blobs-"); err != nil {
		cl.Stop()
		return nil, err
	}
	args := append(append([]string(nil), extra...), "--store", "postgres", "--postgres-url", nodeURL, "--blob-store", "file://"+cl.blobs)
	if cfg.Bus != "" {
		args = append(args, "--bus", cfg.Bus)
	}
	for i := range cfg.Cluster {
		s, err := spawnServer(ctx, opts.ServerArgv, opts.ServerEnv, args, cl.secret, stderr)
		if err != nil {
			cl.Stop()
			return nil, fmt.Errorf("--cluster: node %d: %w", i, err)
		}
		cl.nodes = append(cl.nodes, s)
	}
	return cl, nil
}

// withSearchPath returns the database URL u with search_path set to schema.
func withSearchPath(u, schema string) (string, error) {
	p, err := url.Parse(u)
	if err != nil {
		return "", fmt.Errorf("--postgres-url: %w", err)
	}
	q := p.Query()
	q.Set("search_path", schema)
	p.RawQuery = q.Encode()
	return p.String(), nil
}

// URLs returns the nodes' base URLs.
func (cl *cluster) URLs() []string {
	out := make([]string, len(cl.nodes))
	for i, s := range cl.nodes {
		out[i] = s.URL
	}
	return out
}

// Stop stops every node (SIGTERM, as an operator would), then drops the schema and closes
// the bench's connection. It runs on the way out of a run, also after a failure or an
// interrupt.
func (cl *cluster) Stop() {
	var wg sync.WaitGroup
	for _, s := range cl.nodes {
		wg.Go(s.Stop)
	}
	wg.Wait()
	if cl.blobs != "" {
		_ = os.RemoveAll(cl.blobs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl.pgMu.Lock()
	defer cl.pgMu.Unlock()
	if cl.pg.IsClosed() {
		// The connection broke during the run: drop the schema on a new one.
		conn, err := pgx.Connect(ctx, cl.base)
		if err != nil {
			return
		}
		cl.pg = conn
	}
	_, _ = cl.pg.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{cl.schema}.Sanitize()+" CASCADE")
	_ = cl.pg.Close(ctx)
}

// pgStats adds to m the database's counters: the transactions committed in the bench's
// database (every node's, and the bench's own statistics queries), from pg_stat_database,
// which backends update up to a second late while busy and up to ten seconds late once idle;
// and two the server keeps exactly, for all its databases: the next transaction id (one is
// taken by each transaction that writes) and the WAL written.
func (cl *cluster) pgStats(ctx context.Context, m metricSet) {
	cl.pgMu.Lock()
	defer cl.pgMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var commits, xid int64
	var wal float64
	err := cl.pg.QueryRow(ctx, `SELECT xact_commit, txid_snapshot_xmax(txid_current_snapshot()),
		(pg_current_wal_insert_lsn() - '0/0')::float8
		FROM pg_stat_database WHERE datname = current_database()`).Scan(&commits, &xid, &wal)
	if err == nil {
		m[mPGCommits], m[mPGXid], m[mPGWAL] = float64(commits), float64(xid), wal
	}
}

// localPostgres reports whether the database URL names a server on this machine, whose
// processes the bench can see.
func localPostgres(u string) bool {
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		return false
	}
	if strings.HasPrefix(cfg.Host, "/") { // a Unix socket
		return true
	}
	ip := net.ParseIP(cfg.Host)
	return cfg.Host == "localhost" || (ip != nil && ip.IsLoopback())
}

// postgresSampler returns what adds PostgreSQL's figures to every sample: its processes'
// CPU when the server runs on this machine and /proc shows them, and the transactions
// committed in the database. It says once what it cannot measure.
func (c *coord) postgresSampler() func(ctx context.Context, m metricSet) {
	cpu := localPostgres(c.cluster.base)
	if !cpu {
		c.note("PostgreSQL is not on this machine: its CPU is not measured")
	} else if _, err := postgresCPU(); err != nil {
		c.note("PostgreSQL's CPU is not measured: %v", err)
		cpu = false
	}
	natsLocal := c.cfg.Bus != "" && localNATS(c.cfg.Bus)
	if natsLocal {
		if _, err := natsCPU(); err != nil {
			c.note("the NATS server's CPU is not measured: %v", err)
			natsLocal = false
		}
	}
	return func(ctx context.Context, m metricSet) {
		if cpu {
			if v, err := postgresCPU(); err == nil {
				m[mPGCPU] = v
			}
		}
		if natsLocal {
			if v, err := natsCPU(); err == nil {
				m[mNATSCPU] = v
			}
		}
		c.cluster.pgStats(ctx, m)
	}
}

// localNATS reports whether every server of a NATS URL list is on this machine.
func localNATS(list string) bool {
	for _, s := range strings.Split(list, ",") {
		u, err := url.Parse(strings.TrimSpace(s))
		if err != nil {
			return false
		}
		ip := net.ParseIP(u.Hostname())
		if u.Hostname() != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return false
		}
	}
	return true
}

// postgresFigures puts PostgreSQL's CPU and commits over the load (the window's samples)
// into the report, in all and per acked message.
func (c *coord) postgresFigures(r *Report, samples []sample) {
	if c.cluster == nil || len(samples) < 2 {
		return
	}
	first, last := samples[0].M, samples[len(samples)-1].M
	delta := func(k string) (float64, bool) {
		a, ok1 := first[k]
		b, ok2 := last[k]
		return b - a, ok1 && ok2
	}
	for _, f := range []struct{ key, name string }{{mPGCPU, "postgres_cpu"}, {mNATSCPU, "nats_cpu"}} {
		if cpu, ok := delta(f.key); ok {
			r.Extra[f.name+"_seconds"] = cpu
			if r.Acked > 0 {
				r.Extra[f.name+"_us_per_msg"] = 1e6 * cpu / float64(r.Acked)
			}
		}
	}
	figures := []struct {
		key, name string
		own       float64 // what each sample adds itself
	}{
		{mPGCommits, "pg_commits", 1},
		{mPGXid, "pg_write_xacts", 0},
		{mPGWAL, "pg_wal_bytes", 0},
	}
	for _, f := range figures {
		n, ok := delta(f.key)
		if !ok {
			continue
		}
		n = max(n-f.own*float64(len(samples)-1), 0)
		r.Extra[f.name] = n
		if r.Acked > 0 {
			r.Extra[strings.TrimSuffix(f.name, "_bytes")+"_per_msg"+bytesSuffix(f.name)] = n / float64(r.Acked)
		}
	}
}

// bytesSuffix keeps a figure's _bytes suffix last, where the report looks for it.
func bytesSuffix(name string) string {
	if strings.HasSuffix(name, "_bytes") {
		return "_bytes"
	}
	return ""
}

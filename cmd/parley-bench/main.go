// Command parley-bench is Parley's load tool: it starts (or is pointed at) Parley servers,
// drives them with scenarios of real WebSocket and HTTP clients, verifies every delivery,
// cursor and read position, and reports throughput and latency against a bare echo baseline.
//
// It is a command of its own so that the server binary links none of the load code, charts
// or histograms: it drives the parley binary given by --parley, or one it builds from the
// checkout it runs in.
//
//	parley-bench <scenario> [flags]
//	parley-bench --help
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"

	"github.com/parleychat/parley/internal/bench"
	"github.com/parleychat/parley/internal/cliflag"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := benchCmd(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp): // --help was asked for and printed
	case err != nil:
		fmt.Fprintln(os.Stderr, "parley-bench:", err)
		os.Exit(1)
	}
}

// parleyPkg is the server command built when --parley is not given.
const parleyPkg = "github.com/parleychat/parley/cmd/parley"

// benchWorker is the hidden scenario name under which parley-bench re-executes itself as
// a load worker (--procs > 1): it reads its job on stdin and answers on stdout.
const benchWorker = "_worker"

// benchEcho is the hidden scenario name under which `parley-bench echo` (and --baseline)
// starts the WebSocket echo server it measures, as a child process like `parley serve`.
const benchEcho = "_echo-server"

const benchUsage = `usage: parley-bench <scenario> [flags]

scenarios:
  direct      pairs of users in direct conversations; closed loop, or open loop with --rate
  group       one group: --members, --online of them connected, --senders of them sending
  read-storm  a group whose members all mark the latest message read at once, in rounds
  reconnect   one user's --devices offline while --messages arrive in --convs; cursor and
              snapshot catch-up time and bytes
  idle        --conns WebSockets held with heartbeats; server memory per connection
  mixed       --users acting at --rate actions/s: sends, reads, syncs, history, reconnects
  echo        the baseline: --senders WebSockets to a bare echo server (no Parley), each
              sending direct's frame of --size content bytes and waiting for it to return
  largegroup  a read-fanout group of --members: --online connected, --open of them with it
              open, --senders sending --rate msgs/s (and as many into a direct conversation,
              --compare-direct); send acks, pushes to open members, notices to the others
  readstorm   a read-fanout group: --online members mark one message read at once on their
              WebSockets; storage commits per read, and when the sender is pushed the count
              (read-storm above is the older small-group HTTP scenario)
  broadcast   a read-fanout group of --members, all connected with it open, one sender kept
              --window messages ahead of delivery; deliveries/s (--baseline: broadcast-naive)
  broadcast-naive  broadcast's baseline: the same connections and sender against a bare
              server that copies every frame to every WebSocket (no Parley)
  presence    --users connected, each subscribed to the presence of --subscriptions others
              it shares a group with; --churn of them a minute go away for --offline and
              come back: server CPU for presence, change -> watcher's frame, frames per
              connection per second, memory per connection with and without subscriptions

Without --server the bench starts its own 'parley serve' (rate limits off) in a temporary
directory and stops it at the end: the parley binary given by --parley, or one it builds
from the checkout it runs in ('go build ./cmd/parley', into a temporary directory). Every run verifies deliveries, cursors and read positions;
any violation makes the exit status 1. 'parley-bench <scenario> --help' lists the flags with
the scenario's defaults.

Several nodes: --server URL1,URL2,... spreads the devices (each sender, receiver or
connection) over the nodes at random, seeded (--seed, reported), so that in direct a sender
and its receiver are usually on different nodes; setup goes through the first node.
--cluster N starts N nodes itself on a schema of their own in the PostgreSQL database of
--postgres-url (PARLEY_POSTGRES_URL), created for each run and dropped at its end, passing
--bus to each when given; the report adds PostgreSQL's CPU (its processes on this machine)
and its transactions, commits and WAL per acked message. Nodes without a bus only push what they stored themselves:
devices behind after the load sync again (resyncs). 'direct --cluster 3 --duration 10s
--kill-node-after 5s' SIGKILLs the last node mid-load; its clients move to the next live
node, resend what was not acked under the same client_msg_id, resume from their cursor,
and the time from the kill until each is caught up is reported (killnode_catchup_*).

--runs N runs the scenario N times back to back (each on a fresh server or cluster unless
--server is given) and reports median, min and max of every headline figure; --json then
holds the medians at the top level and each run under "runs". --baseline (direct, group) also runs
echo with the same senders, size, procs, duration and runs, and reports the ratio;
broadcast's --baseline runs broadcast-naive and reports the ratio of deliveries/s.
`

// benchCmd is `parley-bench <scenario> [flags]`.
func benchCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, benchUsage)
		if len(args) == 0 {
			return errors.New("no scenario given")
		}
		return nil
	}
	if args[0] == benchWorker {
		// Ctrl-C reaches the whole process group; the coordinator decides when to stop.
		signal.Ignore(os.Interrupt)
		return bench.Work(context.WithoutCancel(ctx), os.Stdin, stdout, nil)
	}
	if args[0] == benchEcho {
		fs := cliflag.NewFlagSet("parley-bench "+benchEcho, stderr)
		addr := fs.String("addr", "127.0.0.1:0", "address to listen on")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		return bench.EchoServer(ctx, *addr, stdout) // until SIGTERM
	}
	scenario := args[0]
	if !slices.Contains(bench.Scenarios, scenario) {
		fmt.Fprint(stderr, benchUsage)
		return fmt.Errorf("unknown scenario %q", scenario)
	}
	cfg, parley, err := parseBench(scenario, args[1:], getenv, stderr)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own binary: %w", err)
	}
	var serverArgv []string
	if needsServer(scenario, cfg) {
		if parley == "" {
			dir, err := os.MkdirTemp("", "parley-bench-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			if parley, err = buildParley(ctx, dir, stderr); err != nil {
				return err
			}
		}
		serverArgv = []string{parley, "serve"}
	}
	opts := bench.Options{
		ServerArgv: serverArgv,
		WorkerArgv: []string{exe, benchWorker},
		EchoArgv:   []string{exe, benchEcho},
		Stdout:     stdout,
		Stderr:     stderr,
		Terminal:   isTerminal(stderr),
		Version:    version,
	}
	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	_, err = bench.Run(ctx, cfg, opts)
	return err
}

// needsServer reports whether the run starts parley servers: every scenario but the bare
// baselines, unless it is pointed at running ones with --server.
func needsServer(scenario string, c bench.Config) bool {
	return scenario != "echo" && scenario != "broadcast-naive" && c.Server == ""
}

// buildParley builds the server from the checkout the bench runs in, into dir, so that a
// bench run measures the code beside it without a separate build step.
func buildParley(ctx context.Context, dir string, stderr io.Writer) (string, error) {
	out := filepath.Join(dir, "parley")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, parleyPkg)
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build %s (run inside the checkout, or give --parley PATH): %w", parleyPkg, err)
	}
	return out, nil
}

// parseBench turns the flags into a bench.Config whose defaults are the scenario's, and
// returns --parley (empty: build the server from the checkout).
func parseBench(scenario string, args []string, getenv func(string) string, stderr io.Writer) (bench.Config, string, error) {
	c := bench.DefaultConfig(scenario)
	var parley string
	fs := cliflag.NewFlagSet("parley-bench "+scenario, stderr)
	// Each scenario gets the flags it uses, with its own defaults.
	in := func(scenarios ...string) bool { return slices.Contains(scenarios, scenario) }
	serverArgs := new(string)
	if !in("echo", "broadcast-naive") {
		fs.StringVar(&parley, "parley", "", "the parley server binary to start (default: build ./cmd/parley from this checkout)")
		fs.StringVar(&c.Server, "server", "", "base URL of a running server, or several nodes as URL1,URL2,... over which the devices are spread at random (default: start one)")
		fs.StringVar(&c.AdminSecret, "admin-secret", "", "admin secret of --server")
		fs.StringVar(serverArgs, "server-args", "", "extra flags for the server the bench starts, space-separated (e.g. \"--relaxed-durability\")")
		fs.IntVar(&c.Cluster, "cluster", 0, "start N nodes ('parley serve --store postgres') on a fresh schema of --postgres-url's database, dropped at the end of each run")
		fs.StringVar(&c.PostgresURL, "postgres-url", bench.DefaultPostgresURL, "PostgreSQL database of --cluster (the schema is created in it)")
		fs.StringVar(&c.Bus, "bus", "", "with --cluster: passed to every node as --bus (nats://...); with a --server list: says the nodes share a bus, so devices do not resync")
		fs.Uint64Var(&c.Seed, "seed", 0, "seed of the random spread of devices over the nodes (0: pick one; reported)")
	}
	if in("direct") {
		fs.DurationVar(&c.KillNodeAfter, "kill-node-after", 0, "with --cluster 2 or more: SIGKILL the last node this long into the load; its clients move to the next live node, and their catch-up time is reported")
	}
	fs.IntVar(&c.Procs, "procs", c.Procs, "load processes: 1 runs the load in this process, N > 1 in N worker processes")
	fs.IntVar(&c.Runs, "runs", c.Runs, "run the scenario N times back to back (a fresh server each time unless --server) and report medians")
	if in("direct", "group") {
		fs.BoolVar(&c.Baseline, "baseline", false, "also run echo (bare WebSocket) with the same senders, size, procs, duration and runs, and report the ratio")
	}
	if in("broadcast") {
		fs.BoolVar(&c.Baseline, "baseline", false, "also run broadcast-naive (a bare broadcast server) with the same connections, window, size, duration and runs, and report the ratio of deliveries/s")
	}
	if in("largegroup", "readstorm", "broadcast", "broadcast-naive") {
		fs.IntVar(&c.Members, "members", c.Members, "group size (members beyond --write-fanout-max put it in read fanout)")
	}
	if in("largegroup") {
		fs.IntVar(&c.Online, "online", c.Online, "members connected over WebSocket (distinct members)")
		fs.IntVar(&c.Open, "open", c.Open, "online members with the group open (the senders among them)")
		fs.IntVar(&c.Senders, "senders", c.Senders, "members sending into the group")
		fs.IntVar(&c.Typers, "typers", c.Typers, "online members (not senders) typing in the group throughout, one \"started\" per 3 s each; the open connections' typing pushes are measured (at most one a second)")
		fs.BoolVar(&c.CompareDirect, "compare-direct", c.CompareDirect, "also send into a direct conversation of two other users at one sender's rate, to compare the ack latencies")
	}
	if in("readstorm") {
		fs.IntVar(&c.Online, "online", c.Online, "members connected over WebSocket, all marking the message read at once")
	}
	if in("broadcast", "broadcast-naive") {
		fs.IntVar(&c.Window, "window", c.Window, "messages sent and not yet received by every connection")
	}
	if in("direct") {
		fs.IntVar(&c.Pairs, "pairs", c.Pairs, "sender/receiver pairs, each in a direct conversation")
	}
	if in("group", "read-storm") {
		fs.IntVar(&c.Members, "members", c.Members, "group size")
		fs.IntVar(&c.Online, "online", c.Online, "members connected over WebSocket")
	}
	if in("group") {
		fs.IntVar(&c.Senders, "senders", c.Senders, "members sending (they are online)")
	}
	if in("echo") {
		fs.IntVar(&c.Senders, "senders", c.Senders, "WebSocket connections, each sending (as direct's pairs)")
	}
	if in("mixed") {
		fs.IntVar(&c.Users, "users", c.Users, "users, in clusters of 10 sharing a group and direct pairs")
	}
	if in("presence") {
		fs.IntVar(&c.Users, "users", c.Users, "users, one WebSocket each, in groups of --subscriptions+1")
		fs.IntVar(&c.Subscriptions, "subscriptions", c.Subscriptions, "users whose presence each user subscribes to (the rest of its group)")
		fs.Float64Var(&c.Churn, "churn", c.Churn, "fraction of the users a minute that disconnect and reconnect, spread evenly over --duration")
		fs.DurationVar(&c.Offline, "offline", c.Offline, "how long a churned user stays away (more than --grace, so that watchers see offline, then online)")
		fs.DurationVar(&c.Grace, "grace", c.Grace, "the server's --presence-grace (passed to the server the bench starts; with --server, say what it runs with)")
		fs.DurationVar(&c.IdleWindow, "idle-window", c.IdleWindow, "subscribed and idle before the churn: the baseline of the server's CPU")
		fs.DurationVar(&c.Heartbeat, "heartbeat", c.Heartbeat, "client ping interval")
	}
	if in("reconnect") {
		fs.IntVar(&c.Devices, "devices", c.Devices, "devices of the user, offline while messages arrive")
		fs.IntVar(&c.Convs, "convs", c.Convs, "conversations the messages arrive in")
		fs.IntVar(&c.Rounds, "rounds", c.Rounds, "offline/reconnect rounds")
	}
	if in("idle") {
		fs.IntVar(&c.Conns, "conns", c.Conns, "WebSocket connections to open and hold")
		fs.DurationVar(&c.Heartbeat, "heartbeat", c.Heartbeat, "client ping interval")
	}
	if in("direct", "group", "mixed", "echo", "largegroup") {
		usage := "total sends/s in open loop (0: closed loop, each sender waits for its ack)"
		if in("largegroup") {
			usage = "sends/s into the group, all senders together (and as many into the direct conversation)"
		}
		if in("mixed") {
			usage = "actions/s of all users together"
		}
		fs.Float64Var(&c.Rate, "rate", c.Rate, usage)
	}
	if in("read-storm") {
		fs.IntVar(&c.Repeat, "repeat", c.Repeat, "reads per member per round (the first advances, the others repeat it)")
	}
	if !in("idle", "presence") {
		usage := "messages to send in all, then stop; 0: run for --duration"
		switch scenario {
		case "reconnect":
			usage = "messages arriving per round"
		case "read-storm":
			usage = "rounds (one message, then every member reads it), then stop; 0: run for --duration"
		}
		if !in("readstorm") {
			fs.Int64Var(&c.Messages, "messages", c.Messages, usage)
		}
		fs.DurationVar(&c.DrainTimeout, "drain-timeout", c.DrainTimeout, "how long receivers may take to catch up after the load")
	}
	if !in("reconnect") {
		usage := "load time (with --messages, only a limit if given too)"
		if in("idle") {
			usage = "how long the connections are held once open"
		}
		if in("readstorm") {
			usage = "how long the storm may take, until the sender is pushed the final count"
		}
		if in("presence") {
			usage = "how long the churn lasts (users still away at its end are waited for)"
		}
		fs.DurationVar(&c.Duration, "duration", c.Duration, usage)
	}
	if in("direct", "group", "read-storm", "mixed", "echo", "largegroup", "readstorm", "broadcast", "broadcast-naive") {
		fs.IntVar(&c.Size, "size", c.Size, "content bytes per message")
	}
	fs.StringVar(&c.JSONPath, "json", "", "write every figure to this JSON file")
	fs.StringVar(&c.ReportPath, "report", "", "write an HTML report with charts to this file")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write the bench process's own CPU profile (pprof) to this file; with --procs 1 it holds the load generator")
	if err := cliflag.Parse(fs, args, getenv); err != nil {
		return c, "", err
	}
	if fs.NArg() > 0 {
		return c, "", fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if given["messages"] && !given["duration"] && scenario != "idle" {
		c.Duration = 0 // run until the messages are acked
	}
	c.ServerArgs = strings.Fields(*serverArgs)
	return c, parley, c.Validate()
}

// isTerminal reports whether w is a terminal (a character device), for the progress line.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

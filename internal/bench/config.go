package bench

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/parleychat/parley/client"
)

// Scenarios, in the order the usage lists them. echo is not Parley: it is the bare
// WebSocket transport of this machine, the baseline the others are compared with.
//
// largegroup, readstorm and broadcast measure read-fanout groups (issue 9); broadcast-naive
// is broadcast's baseline, as echo is direct's: a bare server that copies every frame it
// reads to every connection.
var Scenarios = []string{"direct", "group", "read-storm", "reconnect", "idle", "mixed", "echo",
	"largegroup", "readstorm", "broadcast", "broadcast-naive", "presence"}

// roomScenario reports whether scenario is one of the large-group ones (room.go).
func roomScenario(scenario string) bool {
	switch scenario {
	case "largegroup", "readstorm", "broadcast", "broadcast-naive":
		return true
	}
	return false
}

// fdBudget is how many WebSockets one process opens at most in the idle scenario: the
// machines this runs on allow 20,000 open files per process, and a process needs a few
// for itself.
const fdBudget = 19000

// Config is one bench run. Sizes left at zero take the scenario's default (DefaultConfig);
// the flags of `parley-bench` map one to one onto its fields.
type Config struct {
	Scenario string

	Server      string // base URL of a running server, or several as "URL1,URL2" (see ParseServers); empty starts one
	AdminSecret string // the server's admin secret (required with Server)
	// Cluster > 0 starts that many nodes instead of one, on a fresh schema of the PostgreSQL
	// database PostgresURL, dropped at the end of the run; Bus, if set, is passed to every
	// node as --bus. With a --server list, Bus only says the nodes share one (see Resync).
	Cluster     int
	PostgresURL string
	Bus         string
	// Seed makes the spread of devices over the nodes reproducible; 0 picks one, reported.
	Seed uint64
	// KillNodeAfter (direct, --cluster >= 2) SIGKILLs the last node this long into the
	// load; its clients move to another node, and the time they take to be caught up is
	// measured.
	KillNodeAfter time.Duration
	ServerArgs    []string // extra flags for the server the bench starts
	Procs         int      // load processes: 1 runs the load in this process, N > 1 re-executes N workers

	Pairs    int           // direct: sender/receiver pairs
	Members  int           // group, read-storm, largegroup, readstorm, broadcast: group size
	Online   int           // group, read-storm, largegroup: members connected over WebSocket; readstorm: members reading at once
	Open     int           // largegroup: online members with the group open (the senders among them)
	Senders  int           // group, largegroup: members sending; echo: connections sending
	Typers   int           // largegroup: online members, not senders, typing in the group throughout the load
	Users    int           // mixed: users (in clusters of 10 with a group and direct pairs); presence: users, one connection each
	Devices  int           // reconnect: devices of the one user
	Convs    int           // reconnect: conversations the messages arrive in
	Conns    int           // idle: WebSocket connections
	Messages int64         // messages to ack in all (0: run for Duration); reconnect: per round
	Duration time.Duration // load time (0 with Messages: until they are acked); idle: hold time
	Rate     float64       // direct, group: total sends/s, open loop (0: closed loop); mixed: actions/s
	Size     int           // content bytes per message
	Repeat   int           // read-storm: reads per member per round (the first advances, the rest repeat)
	Rounds   int           // reconnect: offline/reconnect cycles
	Window   int           // broadcast: messages sent and not yet received everywhere
	// CompareDirect (largegroup) adds a direct conversation of two users outside the group, one
	// of them sending at one group sender's rate on its schedule, so that the two ack latencies compare
	// within one run.
	CompareDirect bool

	// Presence (presence.go): each user watches Subscriptions others, Churn of the users a
	// minute go away for Offline and come back; the server's grace is Grace (passed to the
	// server the bench starts as --presence-grace); IdleWindow is the subscribed, idle phase
	// whose CPU is the baseline of the churn's.
	Subscriptions int
	Churn         float64
	Offline       time.Duration
	Grace         time.Duration
	IdleWindow    time.Duration

	Heartbeat    time.Duration // idle, presence: client ping interval
	DrainTimeout time.Duration // how long receivers may take to catch up after the load

	// Runs is how many times the scenario runs back to back (each against a fresh server
	// when the bench starts its own); the figures reported are the medians over the runs.
	Runs int
	// Baseline (direct, group) also runs echo (broadcast: broadcast-naive) with the same senders, size, procs, duration,
	// messages, rate and runs, interleaved with the scenario's runs, and reports the ratios.
	Baseline bool

	JSONPath   string // write every figure as JSON here
	ReportPath string // write an HTML report with charts here
	// CPUProfile is where the bench process writes its own CPU profile (pprof format), to
	// find what the generator spends per message; with --procs 1 the load runs in it.
	CPUProfile string
}

// DefaultConfig returns the defaults of scenario.
func DefaultConfig(scenario string) Config {
	c := Config{
		Scenario: scenario, Procs: 1, Runs: 1, Duration: 10 * time.Second, Size: 64,
		Heartbeat: 25 * time.Second, DrainTimeout: 15 * time.Second,
	}
	switch scenario {
	case "direct":
		c.Pairs = 100
	case "group":
		c.Members, c.Online, c.Senders = 100, 100, 10
	case "read-storm":
		c.Members, c.Online, c.Repeat = 200, 20, 2
	case "reconnect":
		c.Devices, c.Convs, c.Messages, c.Rounds, c.Duration = 3, 10, 1000, 3, 0
	case "idle":
		c.Conns = 1000
	case "mixed":
		c.Users, c.Rate, c.Duration = 100, 200, 60*time.Second
	case "echo":
		c.Senders = 100 // as direct's pairs
	case "largegroup":
		c.Members, c.Online, c.Open, c.Senders, c.Rate, c.CompareDirect = 100000, 15000, 1000, 1, 20, true
		c.Duration = 30 * time.Second
	case "readstorm":
		c.Members, c.Online, c.Duration = 100000, 10000, time.Minute // Duration bounds the storm
	case "broadcast", "broadcast-naive":
		c.Members, c.Window = 10000, 16
	case "presence":
		c.Users, c.Subscriptions, c.Churn, c.Duration = 10000, 100, 0.1, 2*time.Minute
		c.Grace, c.Offline, c.IdleWindow = 30*time.Second, 40*time.Second, 30*time.Second
	}
	return c
}

// Validate reports a configuration that cannot run.
func (c Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(slices.Contains(Scenarios, c.Scenario), "unknown scenario %q (one of %v)", c.Scenario, Scenarios)
	check(c.Server == "" || c.AdminSecret != "", "--admin-secret is required with --server")
	if c.Server != "" {
		_, err := ParseServers(c.Server)
		check(err == nil, "%v", err)
	}
	check(c.Cluster >= 0, "--cluster must not be negative")
	check(c.Cluster == 0 || c.Server == "", "--cluster starts its own nodes; --server does not apply")
	check(c.Cluster == 0 || c.PostgresURL != "", "--cluster needs --postgres-url (PARLEY_POSTGRES_URL)")
	check(c.Cluster == 0 || (c.Scenario != "echo" && c.Scenario != "broadcast-naive"), "%s starts its own server; --cluster does not apply", c.Scenario)
	if c.KillNodeAfter != 0 {
		check(c.Scenario == "direct", "--kill-node-after is for direct")
		check(c.Cluster >= 2, "--kill-node-after needs --cluster 2 or more: the bench kills a node it started, and its clients need another")
		check(c.KillNodeAfter > 0 && c.Messages == 0 && c.KillNodeAfter < c.Duration, "--kill-node-after must fall inside --duration (and --messages not be given)")
	}
	check(c.Procs >= 1, "--procs must be at least 1")
	check(c.Runs >= 1, "--runs must be at least 1")
	check(!c.Baseline || c.Scenario == "direct" || c.Scenario == "group" || c.Scenario == "broadcast", "--baseline is for direct, group and broadcast")
	check(c.Messages >= 0 && c.Duration >= 0 && c.Rate >= 0 && c.Size >= 0, "sizes must not be negative")
	check(c.Messages > 0 || c.Duration > 0 || c.Scenario == "reconnect", "give --duration or --messages")
	switch c.Scenario {
	case "direct":
		check(c.Pairs >= 1, "--pairs must be at least 1")
	case "group":
		check(c.Members >= 2, "--members must be at least 2")
		check(c.Senders >= 1 && c.Senders <= c.Members, "--senders must be 1..members")
		check(c.Online >= c.Senders && c.Online <= c.Members, "--online must be senders..members (senders are online)")
	case "read-storm":
		check(c.Members >= 2, "--members must be at least 2")
		check(c.Online >= 0 && c.Online <= c.Members, "--online must be 0..members")
		check(c.Repeat >= 1, "--repeat must be at least 1")
	case "reconnect":
		check(c.Devices >= 1 && c.Convs >= 1 && c.Messages >= 1 && c.Rounds >= 1, "--devices, --convs, --messages and --rounds must be at least 1")
	case "idle":
		check(c.Conns >= 1, "--conns must be at least 1")
		check(c.Conns <= fdBudget*c.Procs, "%d connections need --procs %d or more: one process opens at most %d", c.Conns, (c.Conns+fdBudget-1)/fdBudget, fdBudget)
		check(c.Heartbeat > 0, "--heartbeat must be positive")
	case "mixed":
		check(c.Users >= 2, "--users must be at least 2")
		check(c.Rate > 0, "--rate must be positive for mixed")
	case "echo":
		check(c.Senders >= 1, "--senders must be at least 1")
		check(c.Server == "", "echo starts its own echo server; --server does not apply")
	case "largegroup":
		check(c.Members >= 2, "--members must be at least 2")
		check(c.Senders >= 1 && c.Senders <= c.Open, "--senders must be 1..open (senders have the group open)")
		check(c.Open <= c.Online && c.Online <= c.Members, "need open <= online <= members")
		check(c.Rate > 0, "--rate must be positive: largegroup is an open loop")
		check(c.Typers >= 0 && c.Typers <= c.Online-c.Senders, "--typers must be 0..online-senders (typers are online and do not send)")
		c.checkSockets(check, c.Online+1)
	case "readstorm":
		check(c.Members >= 2, "--members must be at least 2")
		check(c.Online >= 1 && c.Online < c.Members, "--online (the readers) must be 1..members-1 (the sender does not read)")
		c.checkSockets(check, c.Online+1)
	case "broadcast", "broadcast-naive":
		check(c.Members >= 2, "--members must be at least 2")
		check(c.Window >= 1, "--window must be at least 1")
		check(c.Procs == 1, "broadcast paces its sender by what every connection received, which one process sees: --procs 1 (%d connections fit in one)", fdBudget)
		check(c.Rate == 0, "broadcast is a closed loop paced by deliveries; --rate does not apply")
		c.checkSockets(check, c.Members)
		check(c.Scenario == "broadcast" || c.Server == "", "broadcast-naive starts its own server; --server does not apply")
	case "presence":
		// A block of subscriptions+1 users is one group, which must stay in write fanout
		// (500 members by default) for its members to see each other.
		check(c.Subscriptions >= 1 && c.Subscriptions <= 499, "--subscriptions must be 1..499 (one group of subscriptions+1 per block, at most 500 members)")
		check(c.Users > c.Subscriptions, "--users must be more than --subscriptions")
		check(c.Churn >= 0 && c.Churn <= 1, "--churn is a fraction of the users per minute: 0..1")
		check(c.Offline > c.Grace && c.Grace >= 0, "--offline must exceed --grace, or no change is ever seen")
		check(c.IdleWindow >= 2*time.Second, "--idle-window must be at least 2s (two samples of the server's CPU)")
		check(c.Heartbeat > 0, "--heartbeat must be positive")
		check(c.Cluster == 0, "presence drives one node: --cluster does not apply")
		c.checkSockets(check, c.Users)
	}
	return errors.Join(errs...)
}

// checkSockets checks that n WebSockets fit the processes: one opens at most fdBudget.
func (c Config) checkSockets(check func(bool, string, ...any), n int) {
	check(n <= fdBudget*c.Procs, "%d connections need --procs %d or more: one process opens at most %d", n, (n+fdBudget-1)/fdBudget, fdBudget)
}

// Hooks let tests reach into a run in this process. Worker processes have none.
type Hooks struct {
	// DropEvent, if it returns true, hides a sync event from the checks of the receiving
	// device, as a faulty server or SDK that lost it would: the run must report it.
	DropEvent func(user, device string, ev client.SyncEvent) bool
}

// Options are how the bench reaches the world beyond its Config.
type Options struct {
	// ServerArgv starts a server when Config.Server is empty: the parley binary and
	// "serve" (flags for address, data, secret and rate limits are added). The nodes of
	// --cluster get ServerEnv added to their environment.
	ServerArgv []string
	ServerEnv  []string
	// WorkerArgv starts a worker process (Procs > 1): the parley binary and the hidden
	// worker command. WorkerEnv is added to its environment.
	WorkerArgv []string
	WorkerEnv  []string
	// EchoArgv starts the echo scenario's WebSocket echo server (see EchoServer): the parley
	// binary and the hidden echo-server command. EchoEnv is added to its environment.
	EchoArgv []string
	EchoEnv  []string
	// Stdout receives the final table; Stderr progress and notes. Nil discards.
	Stdout, Stderr io.Writer
	// Terminal makes the progress line redraw in place (\r) instead of printing lines.
	Terminal bool
	// Version is the load tool's version, recorded in every report (Env).
	Version string
	// Hooks are for tests; honoured by the in-process worker only.
	Hooks *Hooks
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"regexp"
	"strings"
	"time"

	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/internal/cliflag"
	"github.com/parleychat/parley/internal/redact"
	"github.com/parleychat/parley/internal/server"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/tier"
)

// serveConfig is everything `parley serve` is configured with.
type serveConfig struct {
	Addr        string
	DebugAddr   string
	DebugPublic bool // serve pprof on a non-loopback --debug-addr all the same
	LogLevel    string
	LogFormat   string
	Node        server.Config
}

// shutdownBudget is how long a SIGTERM drain may take: within the 10 s that supervisors such
// as `docker stop` wait before killing (docs/protocol.md section 11.3).
const shutdownBudget = 8 * time.Second

func parseServe(args []string, getenv func(string) string, stderr io.Writer) (serveConfig, error) {
	c := serveConfig{Node: server.DefaultConfig("./data")}
	n := &c.Node
	fs, sealBus := serveFlags(&c, stderr)
	if err := parseFlags(fs, args, getenv); err != nil {
		return c, err
	}
	n.BusNoSeal = !*sealBus
	if fs.NArg() > 0 {
		return c, fmt.Errorf("serve takes no arguments, got %q", fs.Args())
	}
	if n.Gateway.DevLogin && !loopbackAddr(c.Addr) {
		return c, fmt.Errorf("--dev-login signs anyone in without a secret, so it needs a loopback --addr (127.0.0.1, [::1] or localhost), not %q", c.Addr)
	}
	return c, errors.Join(c.validate(), flagTerms(n.Validate()))
}

// serveFlags returns the flag set of `parley serve`, each flag bound to its field of c with
// c's value as the default, and --bus-seal, which is read after parsing because it is the
// reverse of the field it sets (server.Config.BusNoSeal). The README's flag table is checked
// against it (readme_test.go).
func serveFlags(c *serveConfig, stderr io.Writer) (fs *flag.FlagSet, sealBus *bool) {
	n := &c.Node
	fs = newFlagSet("serve", stderr)
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:8080", "address to listen on (port 0 picks a free port)")
	fs.StringVar(&c.DebugAddr, "debug-addr", "", "if set, serve Go's pprof profiles on this loopback address")
	fs.BoolVar(&c.DebugPublic, "debug-addr-public", false, "allow a non-loopback --debug-addr (pprof exposes memory contents: only behind a firewall)")
	fs.StringVar(&n.Data, "data", n.Data, "data directory of the embedded store (created if missing)")
	fs.StringVar(&n.AdminSecret, "admin-secret", "", fmt.Sprintf("operator bearer secret, at least %d bytes; generated into the data directory when empty", server.MinAdminSecret))
	fs.IntVar(&n.Gateway.LongPollsPerUser, "longpolls-per-user", n.Gateway.LongPollsPerUser, "long-polls one user may have waiting at once (one per device)")
	fs.DurationVar(&n.Gateway.BodyTimeout, "body-timeout", n.Gateway.BodyTimeout, "time a client may take to send a request body (408 past it)")
	fs.DurationVar(&n.Gateway.WriteTimeout, "write-timeout", n.Gateway.WriteTimeout, "time a client may take to read each 64 KiB of a response, or a WebSocket frame (disconnected past it)")
	fs.StringVar(&n.Engine, "store", "", "storage engine: pebble or sqlite, embedded (default: the data directory's own, pebble for a new one), or postgres, shared by several nodes")
	fs.StringVar(&n.PostgresURL, "postgres-url", "", "PostgreSQL connection string for --store postgres (postgres://user:pass@host:5432/db?sslmode=verify-full&sslrootcert=ca.pem); without sslmode, disable on a loopback host or unix socket and verify-full on any other")
	fs.IntVar(&n.PostgresMaxBatch, "postgres-max-batch", 0, "with --store postgres: most sends one transaction carries (0: 256)")
	fs.DurationVar(&n.PostgresBatchWait, "postgres-batch-wait", 0, "with --store postgres: how long the appender gathers sends before a transaction while busy (0: 2ms; longer trades latency for throughput; negative: never waits)")
	fs.StringVar(&n.BusURL, "bus", "", "NATS URL (nats://host:port; nats://user:pass@host:port or nats://token@host:port with auth) linking the nodes that share one store; empty for a single node")
	fs.StringVar(&n.BusAuth.CredsFile, "bus-creds", "", "with --bus: NATS .creds file (user JWT and nkey seed) the node authenticates with")
	fs.StringVar(&n.BusAuth.NkeyFile, "bus-nkey", "", "with --bus: file holding the NATS user nkey seed (SU...) the node authenticates with")
	fs.StringVar(&n.BusAuth.TLSCA, "bus-tls-ca", "", "with --bus: PEM CA certificate(s) that verify the NATS server; the connection must then be TLS")
	fs.StringVar(&n.BusAuth.TLSCert, "bus-tls-cert", "", "with --bus: PEM client certificate for NATS mutual TLS (with --bus-tls-key)")
	fs.StringVar(&n.BusAuth.TLSKey, "bus-tls-key", "", "with --bus: PEM key of --bus-tls-cert")
	sealBus = fs.Bool("bus-seal", true, "seal every bus message with the cluster key kept in the store (false only to measure its cost, or on a trusted network)")
	fs.StringVar(&n.BlobStore, "blob-store", "", "where attachments' bytes are kept: empty for files under the data directory, file:///path, or s3://bucket[/prefix]?endpoint=https://host&region=... (keys from the AWS_* variables or &credentials_file=); required with --store postgres")
	fs.StringVar(&n.UploadsDir, "uploads-dir", "", "where uploads in progress are kept (default: uploads under the data directory); nodes on one --store postgres resume one another's uploads only if they share it, else route each /v1/uploads/{id} to one node")
	fs.DurationVar(&n.Tier.HotWindow, "hot-window", n.Tier.HotWindow, "how long messages stay in the hot store before they move to compressed segments in the blob store (0: every message stays hot); sync events and client_msg_id repeats are kept as long")
	fs.DurationVar(&n.Tier.Interval, "tier-every", tier.DefaultInterval, "how often the job that moves old messages to the cold tier runs")
	fs.DurationVar(&n.Tier.Retention, "retention", 0, "how long messages are kept at all, unless a group's owner gives the group its own (within --group-retention-min and --group-retention-max): older ones, hot or cold, are deleted with their attachments' references and read as gone at once (0: kept for ever)")
	fs.DurationVar(&n.Tier.GroupRetentionMin, "group-retention-min", n.Tier.GroupRetentionMin, "shortest retention a group's owner may give the group instead of --retention")
	fs.DurationVar(&n.Tier.GroupRetentionMax, "group-retention-max", 0, "longest retention a group's owner may give the group instead of --retention (0: no upper bound)")
	fs.Int64Var(&n.Tier.CacheBytes, "tier-cache", tier.DefaultCacheBytes, "bytes of decoded cold segments kept in memory")
	fs.Int64Var(&n.Chat.MaxUploadSize, "max-upload-size", n.Chat.MaxUploadSize, "largest attachment, in bytes")
	fs.Int64Var(&n.Chat.UploadQuota, "upload-quota", n.Chat.UploadQuota, "bytes one user may upload in 24 hours (at least --max-upload-size)")
	fs.DurationVar(&n.Attach.IdleAfter, "upload-idle", 24*time.Hour, "how long an attachment that no message carries is kept (never sent, or every message carrying it recalled)")
	fs.BoolVar(&n.Relaxed, "relaxed-durability", false, "fsync less: may lose the last acked messages on power loss (sqlite), or even on a crash of the process (pebble)")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", "text", "text or json")
	fs.DurationVar(&n.Chat.RecallWindow, "recall-window", n.Chat.RecallWindow, "how long a sender may recall a message")
	fs.DurationVar(&n.Chat.EventRetention, "event-retention", n.Chat.EventRetention, "how long sync events are kept (older cursors get 410)")
	fs.IntVar(&n.Chat.MaxGroupMembers, "max-group-members", n.Chat.MaxGroupMembers, "largest group")
	fs.IntVar(&n.Chat.WriteFanoutMax, "write-fanout-max", n.Chat.WriteFanoutMax, "largest group whose messages go into every member's sync log; a larger one switches to read fanout")
	fs.DurationVar(&n.Chat.DefaultTokenTTL, "token-ttl", n.Chat.DefaultTokenTTL, "default lifetime of a device token")
	fs.DurationVar(&n.Gateway.HeartbeatInterval, "heartbeat", n.Gateway.HeartbeatInterval, "WebSocket ping interval")
	fs.DurationVar(&n.Gateway.IdleTimeout, "idle-timeout", n.Gateway.IdleTimeout, "close a WebSocket silent for this long")
	fs.DurationVar(&n.Presence.Grace, "presence-grace", n.Presence.Grace, "a user whose last device left shows offline only after this long without a reconnect")
	fs.DurationVar(&n.Presence.Timeout, "presence-timeout", n.Presence.Timeout, "a node silent for this long (no presence heartbeat) has its users taken offline")
	fs.IntVar(&n.Gateway.SendQueue, "send-queue", n.Gateway.SendQueue, "outbound frames a WebSocket may have pending before it is dropped as too slow")
	fs.Float64Var(&n.Gateway.SendRate, "send-rate", n.Gateway.SendRate, "messages per second per device (0 turns the limit off)")
	fs.IntVar(&n.Gateway.SendBurst, "send-burst", n.Gateway.SendBurst, "burst of the send rate limit")
	fs.Float64Var(&n.Gateway.RequestRate, "request-rate", n.Gateway.RequestRate, "requests per second per device (0 turns the limit off)")
	fs.IntVar(&n.Gateway.RequestBurst, "request-burst", n.Gateway.RequestBurst, "burst of the request rate limit")
	fs.Float64Var(&n.Gateway.HistoryRate, "history-rate", n.Gateway.HistoryRate, "history pages per second per user, all devices (0 turns the limit off)")
	fs.IntVar(&n.Gateway.HistoryBurst, "history-burst", n.Gateway.HistoryBurst, "burst of the history rate limit")
	fs.DurationVar(&n.Gateway.PullDelayMax, "pull-delay-max", n.Gateway.PullDelayMax, "largest random delay a large group's notice asks clients to wait before they fetch its messages")
	fs.Float64Var(&n.Gateway.FanoutRate, "fanout-rate", n.Gateway.FanoutRate, "sync events per second a device's calls may create, a group send counting one per member (0 turns the limit off)")
	fs.IntVar(&n.Gateway.FanoutBurst, "fanout-burst", n.Gateway.FanoutBurst, "burst of the fanout rate limit")
	fs.DurationVar(&n.Gateway.ConvChangeEvery, "conv-change-every", n.Gateway.ConvChangeEvery, "after the burst, one rename or member change per conversation per this interval (0 turns the limit off)")
	fs.IntVar(&n.Gateway.ConvChangeBurst, "conv-change-burst", n.Gateway.ConvChangeBurst, "burst of the per-conversation change limit")
	fs.DurationVar(&n.Gateway.ConvCreateEvery, "conv-create-every", n.Gateway.ConvCreateEvery, "after the burst, one new conversation per user per this interval (0 turns the limit off)")
	fs.IntVar(&n.Gateway.ConvCreateBurst, "conv-create-burst", n.Gateway.ConvCreateBurst, "burst of the per-user conversation creation limit")
	fs.BoolVar(&n.Gateway.DevLogin, "dev-login", false, "let the web client sign in by user and device name alone (development; loopback --addr only)")
	pushFlags(fs, &n.Push, &n.Chat.MaxPushDevices)
	return fs, sealBus
}

// validate checks what only serve has (the node's own settings are server.Config.Validate's):
// the bus's credential and TLS files are read there, so that a wrong one stops the node
// before it opens anything, and here a private debug address.
func (c serveConfig) validate() error {
	if c.DebugAddr != "" && !loopbackAddr(c.DebugAddr) && !c.DebugPublic {
		return fmt.Errorf("--debug-addr %q is not a loopback address: pprof exposes the process's memory "+
			"contents (tokens, messages), so it is refused unless --debug-addr-public is also given", c.DebugAddr)
	}
	return nil
}

// configFlags names the flag of each server.Config field that Validate can name, so that
// its errors reach the operator in the words of the command line.
var configFlags = map[string]string{
	"AdminSecret":         "admin-secret",
	"Presence.Timeout":    "presence-timeout",
	"Presence.Grace":      "presence-grace",
	"Engine":              "store",
	"PostgresURL":         "postgres-url",
	"PostgresMaxBatch":    "postgres-max-batch",
	"PostgresBatchWait":   "postgres-batch-wait",
	"Relaxed":             "relaxed-durability",
	"BlobStore":           "blob-store",
	"Tier":                "hot-window or --tier-cache",
	"MaxUploadSize":       "max-upload-size",
	"UploadQuota":         "upload-quota",
	"BusURL":              "bus",
	"BusAuth":             "bus-creds, --bus-nkey or --bus-tls-*",
	"Push.Content":        "push-content",
	"Push.APNsKeyFile":    "apns-key-file",
	"Push.APNsKeyID":      "apns-key-id",
	"Push.APNsTeamID":     "apns-team-id",
	"Push.APNsTopic":      "apns-topic",
	"Push.WebPushHosts":   "webpush-hosts",
	"Push.WebPushSubject": "webpush-subject",
	"Push.Grace":          "push-grace",
}

// configTerm matches a field name in a server.FieldError's text.
var configTerm = regexp.MustCompile(`\b(Push\.)?[A-Z][A-Za-z]+\b`)

// flagTerms rewords the server.FieldErrors in err with flag names: "PostgresURL is required
// with Engine postgres" becomes "--postgres-url (PARLEY_POSTGRES_URL) is required with
// --store postgres". Other errors pass unchanged.
func flagTerms(err error) error {
	if err == nil {
		return nil
	}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		var errs []error
		for _, e := range joined.Unwrap() {
			errs = append(errs, flagTerms(e))
		}
		return errors.Join(errs...)
	}
	var fe *server.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	subject := fe.Field
	if f, ok := configFlags[fe.Field]; ok {
		subject = "--" + f
		if !strings.Contains(f, " ") {
			subject += " (" + cliflag.EnvName(f) + ")"
		}
	}
	msg := configTerm.ReplaceAllStringFunc(fe.Msg, func(term string) string {
		if f, ok := configFlags[term]; ok {
			return "--" + f
		}
		return term
	})
	return errors.New(subject + " " + msg)
}

// serve runs the server until ctx ends (SIGTERM, SIGINT), then drains it.
// tierCrashEnv names the variable that makes the server kill itself at one step of sealing
// a cold segment ("added", "stored" or "sealed": tier.StepAdded...), for the crash tests.
const tierCrashEnv = "PARLEY_TEST_TIER_CRASH"

func serve(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseServe(args, getenv, stderr)
	if err != nil {
		return err
	}
	if cfg.Node.Logger, err = newLogger(stderr, cfg.LogLevel, cfg.LogFormat); err != nil {
		return err
	}
	privateUmask()
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	if cfg.Node.Gateway.DevLogin && !ln.Addr().(*net.TCPAddr).IP.IsLoopback() {
		return fmt.Errorf("--dev-login: %s resolved to %s, which is not a loopback address", cfg.Addr, ln.Addr())
	}
	cfg.Node.Version = version
	if step := getenv(tierCrashEnv); step != "" {
		cfg.Node.Tier.Crash = func(s string) {
			if s == step {
				killSelf()
			}
		}
	}
	srv, err := server.New(ctx, cfg.Node)
	if err != nil {
		return flagTerms(err)
	}
	if srv.SecretCreated {
		fmt.Fprintf(stdout, "generated admin secret (kept in %s): %s\n", cfg.Node.Data, srv.AdminSecret)
	}
	if cfg.DebugAddr != "" {
		go serveDebug(cfg.DebugAddr, cfg.Node.Logger)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "parley %s listening on http://%s (data %s)\n", version, ln.Addr(), cfg.Node.Data)
	if cfg.Node.Gateway.DevLogin {
		fmt.Fprintf(stdout, "dev login is on: open http://%s/ and sign in with any user name\n", ln.Addr())
	}
	cfg.Node.Logger.Info("serving", "addr", ln.Addr().String(), "data", cfg.Node.Data, "relaxed", cfg.Node.Relaxed, "bus", redact.URL(cfg.Node.BusURL))

	select {
	case err := <-served:
		srv.Close()
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	cfg.Node.Logger.Info("draining")
	dctx, cancel := context.WithTimeout(context.Background(), shutdownBudget)
	defer cancel()
	if err := srv.Shutdown(dctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("shutdown: %w", err)
	}
	cfg.Node.Logger.Info("stopped")
	return nil
}

// openData opens the store and token signer of a data directory (or of the PostgreSQL
// database at pgURL, with engine "postgres") for the operator commands, with the engine
// that created it; engine "" means the directory's own
// (server.DefaultEngine for a new directory). With SQLite (WAL) they work beside a running
// server. Pebble allows one process per directory and the server keeps the hot state in its
// memory, so on Pebble they take the server's lock: refused, with a pointer to the admin API,
// while a server runs, and no server starts until they are done.
func openData(ctx context.Context, dir, engine, pgURL string) (*chat.Service, func(), error) {
	st, cfg, done, err := openStoreOnly(ctx, dir, engine, pgURL)
	if err != nil {
		return nil, nil, err
	}
	signer, dirKey, err := server.Keys(server.Secrets(ctx, cfg, st))
	if err != nil {
		done()
		return nil, nil, err
	}
	svc := chat.New(chat.Options{Store: st, Signer: signer, DirectIDKey: dirKey, Config: chat.DefaultConfig()})
	return svc, done, nil
}

// openStoreOnly opens the store of an operator command (the data directory's, or
// PostgreSQL's), locking a Pebble directory; done closes and unlocks it.
func openStoreOnly(ctx context.Context, dir, engine, pgURL string) (st store.Store, cfg server.Config, done func(), err error) {
	privateUmask()
	cfg = server.DefaultConfig(dir)
	cfg.Engine, cfg.PostgresURL = engine, pgURL
	unlock := func() {}
	if server.EngineOf(cfg) == "pebble" {
		if unlock, err = server.LockData(dir); errors.Is(err, server.ErrDataInUse) {
			return nil, cfg, nil, fmt.Errorf("%w: on the pebble engine this command needs the server stopped; "+
				"while it runs, use the admin API (POST /v1/admin/users, POST /v1/admin/tokens)", err)
		} else if err != nil {
			return nil, cfg, nil, err
		}
	}
	if st, err = server.OpenStore(ctx, cfg, nil); err != nil {
		unlock()
		return nil, cfg, nil, fmt.Errorf("open store: %w", err)
	}
	return st, cfg, func() { st.Close(); unlock() }, nil
}

// serveDebug serves the pprof profiles on their own address, never on the public one.
func serveDebug(addr string, log *slog.Logger) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Info("debug server", "addr", addr)
	if err := srv.ListenAndServe(); err != nil {
		log.Warn("debug server stopped", "err", err)
	}
}

// loopbackAddr reports whether a listen address ("host:port") names a loopback host: an IP
// literal such as 127.0.0.1 or ::1, or "localhost". An empty host (all interfaces) is not.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

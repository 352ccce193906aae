package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/parleychat/parley/internal/auth"
	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/internal/gateway"
	"github.com/parleychat/parley/internal/hub"
	"github.com/parleychat/parley/internal/metrics"
	"github.com/parleychat/parley/internal/store/sqlite"
)

// serveConfig is everything `parley serve` is configured with.
type serveConfig struct {
	Addr        string
	Data        string
	AdminSecret string
	Relaxed     bool
	LogLevel    string
	LogFormat   string
	Chat        chat.Config
	Gateway     gateway.Config
}

// shutdownBudget is how long a SIGTERM drain may take (PROTOCOL section 11 allows 10 s).
const shutdownBudget = 8 * time.Second

func parseServe(args []string, getenv func(string) string, stderr io.Writer) (serveConfig, error) {
	c := serveConfig{Chat: chat.DefaultConfig(), Gateway: gateway.DefaultConfig()}
	fs := newFlagSet("serve", stderr)
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:8080", "address to listen on (port 0 picks a free port)")
	fs.StringVar(&c.Data, "data", "./data", "data directory of the embedded store (created if missing)")
	fs.StringVar(&c.AdminSecret, "admin-secret", "", "operator bearer secret; generated into the data directory when empty")
	fs.BoolVar(&c.Relaxed, "relaxed-durability", false, "fsync less: survives a process crash but may lose the last acked messages on power loss")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", "text", "text or json")
	fs.DurationVar(&c.Chat.RecallWindow, "recall-window", c.Chat.RecallWindow, "how long a sender may recall a message")
	fs.DurationVar(&c.Chat.EventRetention, "event-retention", c.Chat.EventRetention, "how long sync events are kept (older cursors get 410)")
	fs.IntVar(&c.Chat.MaxGroupMembers, "max-group-members", c.Chat.MaxGroupMembers, "largest group")
	fs.DurationVar(&c.Chat.DefaultTokenTTL, "token-ttl", c.Chat.DefaultTokenTTL, "default lifetime of a device token")
	fs.DurationVar(&c.Gateway.HeartbeatInterval, "heartbeat", c.Gateway.HeartbeatInterval, "WebSocket ping interval")
	fs.DurationVar(&c.Gateway.IdleTimeout, "idle-timeout", c.Gateway.IdleTimeout, "close a WebSocket silent for this long")
	fs.IntVar(&c.Gateway.SendQueue, "send-queue", c.Gateway.SendQueue, "outbound frames a WebSocket may have pending before it is dropped as too slow")
	fs.Float64Var(&c.Gateway.SendRate, "send-rate", c.Gateway.SendRate, "messages per second per device (0 turns the limit off)")
	fs.IntVar(&c.Gateway.SendBurst, "send-burst", c.Gateway.SendBurst, "burst of the send rate limit")
	fs.Float64Var(&c.Gateway.RequestRate, "request-rate", c.Gateway.RequestRate, "requests per second per device (0 turns the limit off)")
	fs.IntVar(&c.Gateway.RequestBurst, "request-burst", c.Gateway.RequestBurst, "burst of the request rate limit")
	if err := parseFlags(fs, args, getenv); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("serve takes no arguments, got %q", fs.Args())
	}
	return c, errors.Join(c.Chat.Validate(), c.Gateway.Validate())
}

// serve runs the server until ctx ends (SIGTERM, SIGINT), then drains it.
func serve(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseServe(args, getenv, stderr)
	if err != nil {
		return err
	}
	log, err := newLogger(stderr, cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return err
	}
	m := metrics.New()
	st, err := sqlite.Open(ctx, sqlite.Options{Dir: cfg.Data, Relaxed: cfg.Relaxed, OnCommit: m.ObserveCommit})
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer st.Close()
	key, _, err := auth.LoadOrCreateSecret(cfg.Data, auth.SigningKeyFile)
	if err != nil {
		return err
	}
	if cfg.AdminSecret == "" {
		secret, created, err := auth.LoadOrCreateSecret(cfg.Data, auth.AdminSecretFile)
		if err != nil {
			return err
		}
		if created {
			fmt.Fprintf(stdout, "generated admin secret (kept in %s/%s): %s\n", cfg.Data, auth.AdminSecretFile, secret)
		}
		cfg.AdminSecret = secret
	}
	svc := chat.New(chat.Options{Store: st, Hub: hub.New(), Signer: auth.NewSigner([]byte(key)), Config: cfg.Chat, Logger: log, Observer: m})
	gw := gateway.New(gateway.Options{Service: svc, AdminSecret: cfg.AdminSecret, Config: cfg.Gateway, Logger: log, Metrics: m})

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: gw, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	bg, stopBG := context.WithCancel(context.Background())
	defer stopBG()
	go svc.RunRetention(bg, time.Hour)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "parley %s listening on http://%s (data %s)\n", version, ln.Addr(), cfg.Data)
	log.Info("serving", "addr", ln.Addr().String(), "data", cfg.Data, "relaxed", cfg.Relaxed)

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("draining")
	dctx, cancel := context.WithTimeout(context.Background(), shutdownBudget)
	defer cancel()
	// The gateway answers waiting long-polls and closes WebSockets (1001) while the HTTP
	// server stops accepting and finishes in-flight requests.
	gwDone := make(chan error, 1)
	go func() { gwDone <- gw.Shutdown(dctx) }()
	err = errors.Join(srv.Shutdown(dctx), <-gwDone)
	stopBG()
	if cerr := st.Close(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}

// openData opens the store and token signer of a data directory for the operator commands.
func openData(ctx context.Context, dir string) (*chat.Service, func(), error) {
	st, err := sqlite.Open(ctx, sqlite.Options{Dir: dir})
	if err != nil {
		return nil, nil, fmt.Errorf("open store: %w", err)
	}
	key, _, err := auth.LoadOrCreateSecret(dir, auth.SigningKeyFile)
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	svc := chat.New(chat.Options{Store: st, Signer: auth.NewSigner([]byte(key)), Config: chat.DefaultConfig()})
	return svc, func() { st.Close() }, nil
}

// Package parleytest starts real Parley nodes for tests: the production wiring of package
// server on a loopback port, so tests speak HTTP and WebSocket over real sockets.
package parleytest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/bus"
	"github.com/parleychat/parley/internal/bus/bustest"
	"github.com/parleychat/parley/internal/server"
	"github.com/parleychat/parley/internal/store/postgres/pgtest"
	"github.com/parleychat/parley/protocol"
)

// Server is a running node.
type Server struct {
	*server.Server
	URL   string // http://127.0.0.1:port
	WSURL string // ws://127.0.0.1:port/v1/ws
	Dir   string // data directory
	// Config is the configuration it was started with, to start it again on the same data.
	Config server.Config
	// Nodes are the nodes of a cluster (see EnvNodes); nil for a single node.
	Nodes []*Server
}

// Start runs a node on a fresh data directory (or database schema: see EnvStore) and stops
// it when the test ends. configure,
// if given, may change the configuration first. The admin secret is "test-admin-secret-0123456789abcdef" (Validate wants 32 bytes).
func Start(tb testing.TB, configure ...func(*server.Config)) *Server {
	tb.Helper()
	cfg := server.DefaultConfig(tb.TempDir())
	cfg.AdminSecret = "test-admin-secret-0123456789abcdef"
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv(EnvStore) == "postgres" {
		cfg.Engine, cfg.PostgresURL = "postgres", pgtest.SchemaURL(tb, cfg.Data)
		cfg.BlobStore = cmp.Or(os.Getenv(EnvBlobStore), SharedBlobs(cfg.Data)) // one store for every node of a cluster
		cfg.UploadsDir = filepath.Join(cfg.Data, "shared-uploads")
	}
	for _, f := range configure {
		f(&cfg)
	}
	return StartWith(tb, cfg)
}

// SharedBlobs returns the blob store URL of a file store under dir, for nodes on a shared
// database, which need one (server.Config.BlobStore): on one machine every node sees it.
func SharedBlobs(dir string) string { return "file://" + filepath.Join(dir, "shared-blobs") }

// EnvBlobStore names the variable that gives nodes on PostgreSQL another blob store than a
// shared directory: an s3:// URL (server.Config.BlobStore), to run the end-to-end tests on
// object storage.
const EnvBlobStore = "PARLEY_TEST_BLOB_STORE"

// EnvStore names the variable that selects the store of the nodes Start runs: unset for
// the default embedded engine, "postgres" for a schema of its own in the test database
// (pgtest), so that the same end-to-end tests check the PostgreSQL backend.
const EnvStore = "PARLEY_TEST_STORE"

// EnvNodes names the variable that makes Start and StartWith run a cluster: with
// PARLEY_TEST_NODES=3 and EnvStore=postgres, three nodes share the test's schema and talk
// over the test NATS server (bustest; skipped without one), and the
// Server's URL is a load balancer in front of them that sends every request and every
// WebSocket to one of them at random. The Server's own fields (Service, Gateway...) are
// the first node's.
const EnvNodes = "PARLEY_TEST_NODES"

// StartWith runs a node with cfg (its data directory may hold an earlier node's data) and
// stops it when the test ends; a cluster of them with EnvNodes.
func StartWith(tb testing.TB, cfg server.Config) *Server {
	tb.Helper()
	n, _ := strconv.Atoi(os.Getenv(EnvNodes))
	if n < 2 || !server.Shared(cfg) {
		s := startNode(tb, cfg)
		tb.Cleanup(func() { s.Stop(tb) })
		return s
	}
	nodes := make([]*Server, n)
	prefix := bustest.RandomPrefix(tb) // this cluster's subjects, apart from other tests'
	for i := range nodes {
		c := cfg
		if i > 0 {
			c.Data = tb.TempDir() // the node's files (none that matter: the store is shared)
		}
		if c.Bus == nil && c.BusURL == "" {
			c.Bus = bustest.OpenNATS(tb, bustest.NATSURL(), bus.NATSOptions{Prefix: prefix, Name: fmt.Sprintf("node %d", i), NoEcho: true})
		}
		nodes[i] = startNode(tb, c)
	}
	s := *nodes[0]
	s.Nodes = nodes
	base := balance(tb, nodes)
	s.URL, s.WSURL = "http://"+base, "ws://"+base+"/v1/ws"
	tb.Cleanup(func() { s.Stop(tb) })
	return &s
}

// startNode runs one node on a loopback port.
func startNode(tb testing.TB, cfg server.Config) *Server {
	tb.Helper()
	srv, err := server.New(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Close()
		tb.Fatal(err)
	}
	go srv.Serve(ln)
	return &Server{Server: srv, URL: "http://" + ln.Addr().String(), WSURL: "ws://" + ln.Addr().String() + "/v1/ws", Dir: cfg.Data, Config: cfg}
}

// balance serves a load balancer in front of nodes until the test ends and returns its
// address. Each credential (a device's token, the admin secret) is sent to a node chosen
// at random when first seen, and stays there, as a client that keeps its connection to
// one node; a user's devices, and the operator, are thus on different nodes. Requests
// without a credential go to a random node each.
func balance(tb testing.TB, nodes []*Server) string {
	tb.Helper()
	targets := make([]*url.URL, len(nodes))
	for i, n := range nodes {
		targets[i], _ = url.Parse(n.URL)
	}
	var mu sync.Mutex
	placed := map[string]*url.URL{}
	pick := func(r *http.Request) *url.URL {
		cred := cmp.Or(r.Header.Get("Authorization"), r.URL.Query().Get("token"))
		if cred == "" {
			return targets[rand.IntN(len(targets))]
		}
		mu.Lock()
		defer mu.Unlock()
		if placed[cred] == nil {
			placed[cred] = targets[rand.IntN(len(targets))]
		}
		return placed[cred]
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(pick(r.In))
			r.Out.Host = r.In.Host
		},
		FlushInterval: -1, // long-polls and streamed bodies pass at once
		ErrorLog:      log.New(io.Discard, "", 0),
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	hs := &http.Server{Handler: proxy}
	go hs.Serve(ln)
	tb.Cleanup(func() { hs.Close() })
	return ln.Addr().String()
}

// Stop drains the node, or every node of a cluster (as SIGTERM does). It is safe to call
// more than once.
func (s *Server) Stop(tb testing.TB) {
	if s.Nodes != nil {
		for _, n := range s.Nodes {
			n.Stop(tb)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "closed") {
		tb.Logf("parleytest: shutdown: %v", err)
	}
}

// User creates a user through the admin API and returns a token for device "d1".
func (s *Server) User(tb testing.TB, userID string) string {
	tb.Helper()
	s.MustDo(tb, "POST", "/v1/admin/users", s.AdminSecret, map[string]string{"user_id": userID}, nil)
	return s.Token(tb, userID, "d1")
}

// Token mints a token for (userID, deviceID) through the admin API.
func (s *Server) Token(tb testing.TB, userID, deviceID string) string {
	tb.Helper()
	var tok protocol.Token
	s.MustDo(tb, "POST", "/v1/admin/tokens", s.AdminSecret, map[string]string{"user_id": userID, "device_id": deviceID}, &tok)
	return tok.Token
}

// Do sends one HTTP request with bearer token (if not empty) and a JSON body (a []byte or
// string is sent as is, anything else is encoded; nil sends none). It returns the status
// and the raw response body.
func (s *Server) Do(tb testing.TB, method, path, token string, body any) (int, []byte) {
	tb.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		r = bytes.NewReader(b)
	case string:
		r = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			tb.Fatal(err)
		}
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, s.URL+path, r)
	if err != nil {
		tb.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if r != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return resp.StatusCode, raw
}

// MustDo is Do that fails the test unless the status is 200 or 201, decoding the answer
// into out when out is not nil.
func (s *Server) MustDo(tb testing.TB, method, path, token string, body, out any) {
	tb.Helper()
	code, raw := s.Do(tb, method, path, token, body)
	if code != http.StatusOK && code != http.StatusCreated {
		tb.Fatalf("%s %s: %d %s", method, path, code, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			tb.Fatalf("%s %s: decode %s: %v", method, path, raw, err)
		}
	}
}

// OneNode skips tb when the tests run on a cluster (EnvNodes): for a test of what one node
// does on its own (its metrics, its per-node limits, a slow client's effect on its
// connection, which the cluster's balancer would absorb), why says which.
func OneNode(tb testing.TB, why string) {
	tb.Helper()
	if n, _ := strconv.Atoi(os.Getenv(EnvNodes)); n >= 2 {
		tb.Skipf("one node only (%s=%d): %s", EnvNodes, n, why)
	}
}

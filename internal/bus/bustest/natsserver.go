package bustest

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// NATSServer is a nats-server process of one test's own, with the configuration the test
// gave it (auth, TLS), on a free loopback port.
type NATSServer struct {
	Addr string // host:port of its client listener
	Dir  string // the directory of its configuration, also free for the test's files
}

// URL returns the server's address with scheme (nats, tls) and userinfo ("user:pass",
// "token", or "" for none).
func (s *NATSServer) URL(scheme, userinfo string) string {
	if userinfo != "" {
		userinfo += "@"
	}
	return scheme + "://" + userinfo + s.Addr
}

// StartNATSServer runs nats-server (from PATH) with config as its configuration file, on a
// loopback port of its choosing, until the test ends. It returns once the server logged
// that it is ready (no polling), and fails the test with the server's log if it did not
// within 15 seconds. It skips the test when nats-server is not installed. dir, if not
// "", is where the configuration goes (the files config refers to may be there already);
// "" means a new t.TempDir().
func StartNATSServer(t testing.TB, dir, config string) *NATSServer {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		t.Skipf("nats-server is not on PATH (install it, e.g. apt-get install nats-server): %v", err)
	}
	if dir == "" {
		dir = t.TempDir()
	}
	conf := filepath.Join(dir, "nats-server.conf")
	if err := os.WriteFile(conf, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "-c", conf, "-a", "127.0.0.1", "-p", "-1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start nats-server: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	listening := regexp.MustCompile(`Listening for client connections on (\S+:\d+)`) // names the port
	ready := make(chan string, 1)
	var log strings.Builder // written until ready is sent; read after that or after logDone
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		addr, sent := "", false
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			if sent {
				continue // the rest of the log is not needed, but must be read
			}
			log.WriteString(line + "\n")
			if m := listening.FindStringSubmatch(line); m != nil {
				addr = m[1]
			}
			if strings.Contains(line, "Server is ready") {
				ready <- addr
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	timer := time.NewTimer(15 * time.Second)
	defer timer.Stop()
	select {
	case addr := <-ready:
		if addr == "" {
			t.Fatalf("nats-server named no client port:\n%s", log.String())
		}
		return &NATSServer{Addr: addr, Dir: dir}
	case <-logDone:
		t.Fatalf("nats-server stopped before it was ready (config %s):\n%s", conf, log.String())
	case <-timer.C:
		t.Fatalf("nats-server not ready within 15s")
	}
	return nil
}

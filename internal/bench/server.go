package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"syscall"
	"time"
)

// localServer is a `parley serve` started by the bench as a child process, so that its CPU
// and memory are its own and not the load generator's.
type localServer struct {
	URL    string
	Secret string
	cmd    *exec.Cmd
	dir    string
	exited chan struct{}
}

var listeningRE = regexp.MustCompile(`listening on (http://\S+)`)

// startServer runs argv (the parley binary and "serve") on 127.0.0.1:0 in a new temporary
// data directory with rate limits off, plus extra flags, and waits for its "listening on"
// line. stderr receives the server's log (warnings and errors only).
func startServer(ctx context.Context, argv, extra []string, stderr io.Writer) (*localServer, error) {
	return spawnServer(ctx, argv, nil, extra, newSecret(), stderr)
}

// newSecret returns a random admin secret for the servers the bench starts.
func newSecret() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// spawnServer is startServer with the admin secret given (the nodes of a cluster share one)
// and env added to the server's environment.
func spawnServer(ctx context.Context, argv, env, extra []string, secret string, stderr io.Writer) (*localServer, error) {
	if len(argv) == 0 {
		return nil, errors.New("no --server given and no server command to start one")
	}
	dir, err := os.MkdirTemp("", "parley-bench-")
	if err != nil {
		return nil, err
	}
	s := &localServer{Secret: secret, dir: dir, exited: make(chan struct{})}
	args := append(append([]string{}, argv[1:]...),
		"--addr", "127.0.0.1:0", "--data", dir, "--admin-secret", s.Secret,
		"--send-rate", "0", "--request-rate", "0", "--fanout-rate", "0", "--history-rate", "0", "--conv-change-every", "0",
		"--conv-create-every", "0", "--log-level", "warn")
	args = append(args, extra...)
	if err := s.start(ctx, exec.Command(argv[0], args...), env, stderr); err != nil {
		return nil, err
	}
	return s, nil
}

// start runs cmd, the child's environment being this process's without PARLEY_* plus env,
// and waits for its "listening on" line, which sets s.URL. On failure s is stopped.
func (s *localServer) start(ctx context.Context, cmd *exec.Cmd, env []string, stderr io.Writer) error {
	dir := s.dir
	s.cmd = cmd
	// The child must not inherit PARLEY_* settings meant for the bench (PARLEY_DURATION...)
	// that serve would refuse; it gets only what it needs.
	s.cmd.Env = append(filterEnv(os.Environ()), env...)
	s.cmd.Stderr = stderr
	detach(s.cmd)
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		removeDir(dir)
		return err
	}
	if err := s.cmd.Start(); err != nil {
		removeDir(dir)
		return fmt.Errorf("start server: %w", err)
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() {
			if m := listeningRE.FindStringSubmatch(sc.Text()); m != nil && !sent {
				found <- m[1]
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	select {
	case s.URL = <-found:
		return nil
	case <-s.exited:
		s.Stop()
		return fmt.Errorf("server exited before listening: %v", s.cmd.ProcessState)
	case <-time.After(30 * time.Second):
		s.Stop()
		return errors.New("server did not print its address within 30s")
	case <-ctx.Done():
		s.Stop()
		return ctx.Err()
	}
}

// removeDir removes a data directory; "" (a server without one) is left alone.
func removeDir(dir string) {
	if dir != "" {
		os.RemoveAll(dir)
	}
}

// Stop terminates the server (SIGTERM, then SIGKILL after 10 s) and removes its data.
func (s *localServer) Stop() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	}
	removeDir(s.dir)
}

// Kill ends the server with SIGKILL, as a crash would, and waits until it is gone. Its data
// directory stays until Stop.
func (s *localServer) Kill() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// filterEnv drops PARLEY_* variables, which the bench and serve would read differently.
func filterEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if len(kv) >= 7 && kv[:7] == "PARLEY_" {
			continue
		}
		out = append(out, kv)
	}
	return out
}

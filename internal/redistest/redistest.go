// Package redistest starts a private redis-server for integration tests.
//
// Every Server is a fresh redis-server process on a free 127.0.0.1 port, with
// persistence off, stopped by t.Cleanup. Tests never touch a server that
// happens to run on :6379. `make test` installs redis-server when missing.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a running redis-server.
type Server struct {
	Addr string // "127.0.0.1:PORT"
	cmd  *exec.Cmd
}

// URL returns "redis://Addr/0".
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// Client returns a go-redis client for the server, closed at test cleanup.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Binary finds redis-server on PATH or in /usr/bin.
func Binary() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/bin/redis-server", "/usr/local/bin/redis-server"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("redis-server not found on PATH: run `make test`, which installs it, or apt-get install redis-server")
}

// Start launches a redis-server for tb and waits until it answers PING.
func Start(tb testing.TB) *Server {
	tb.Helper()
	bin, err := Binary()
	if err != nil {
		tb.Fatal(err)
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		s, err := start(tb, bin)
		if err == nil {
			return s
		}
		lastErr = err // most likely the port was taken between probe and bind
	}
	tb.Fatalf("redistest: start redis-server: %v", lastErr)
	return nil
}

func start(tb testing.TB, bin string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir := tb.TempDir()
	cmd := exec.Command(bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--daemonize", "no", "--loglevel", "warning",
		"--logfile", filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := waitReady(s.Addr, exited); err != nil {
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("%w (log: %s)", err, readLog(filepath.Join(dir, "redis.log")))
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	return s, nil
}

func waitReady(addr string, exited <-chan error) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("redis-server exited: %v", err)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s not ready after 10s: %w", addr, err)
		}
		time.Sleep(5 * time.Millisecond) // polling a starting process; there is no signal to wait on
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func readLog(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "no log"
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}

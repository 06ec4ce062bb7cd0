// Package redistest starts a private redis-server for integration tests.
//
// Every Server is a fresh redis-server process on a free 127.0.0.1 port,
// stopped by t.Cleanup; persistence is off unless StartWith asks for the
// append-only file, with which a test can stop the server (Shutdown, Kill)
// and Restart it on the same port with the data it had persisted. Tests
// never touch a server that happens to run on :6379. `make test` installs
// redis-server when missing.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	// exited receives cmd.Wait's result once; nil after Shutdown or Kill
	// collected it.
	exited chan error
	bin    string
	dir    string
	opts   Options
}

// Options configures StartWith. The zero value is Start's server.
type Options struct {
	// AppendOnly turns the append-only file on with appendfsync everysec
	// (a production setting: at most about a second of writes is lost
	// when the process is killed), so that Restart brings the data back.
	AppendOnly bool
	// Args are more redis-server arguments ("--cluster-enabled", "yes").
	Args []string
	// ConfigFile, when set, is written to the server's directory as
	// redis.conf and given as the first argument; with "--sentinel" in
	// Args it makes a Sentinel (which rewrites its file).
	ConfigFile string
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
	return StartWith(tb, Options{})
}

// StartWith is Start with options.
func StartWith(tb testing.TB, o Options) *Server {
	tb.Helper()
	bin, err := Binary()
	if err != nil {
		tb.Fatal(err)
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			tb.Fatalf("redistest: %v", err)
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), bin: bin, dir: tb.TempDir(), opts: o}
		if lastErr = s.start(); lastErr == nil {
			tb.Cleanup(func() { _ = s.Kill() })
			return s
		}
		// most likely the port was taken between probe and bind
	}
	tb.Fatalf("redistest: start redis-server: %v", lastErr)
	return nil
}

// start runs redis-server on s.Addr in s.dir and waits for PING.
func (s *Server) start() error {
	_, port, _ := net.SplitHostPort(s.Addr)
	aof := []string{"--appendonly", "no"}
	if s.opts.AppendOnly {
		aof = []string{"--appendonly", "yes", "--appendfsync", "everysec"}
	}
	var args []string
	if s.opts.ConfigFile != "" {
		conf := filepath.Join(s.dir, "redis.conf")
		if _, err := os.Stat(conf); err != nil { // a Restart keeps what the server rewrote
			if err := os.WriteFile(conf, []byte(s.opts.ConfigFile), 0o600); err != nil {
				return err
			}
		}
		args = append(args, conf)
	}
	args = append(args,
		"--port", port, "--bind", "127.0.0.1",
		"--save", "", "--dir", s.dir,
		"--daemonize", "no", "--loglevel", "warning",
		"--logfile", filepath.Join(s.dir, "redis.log"))
	if !slices.Contains(s.opts.Args, "--sentinel") {
		args = append(args, aof...)
	}
	args = append(args, s.opts.Args...)
	cmd := exec.Command(s.bin, args...)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := waitReady(s.Addr, cmd.Process.Pid, exited); err != nil {
		if !errors.Is(err, errExited) { // (an exit waitReady saw was read from exited already)
			_ = cmd.Process.Kill()
			<-exited
		}
		return fmt.Errorf("%w (log: %s)", err, readLog(filepath.Join(s.dir, "redis.log")))
	}
	s.cmd, s.exited = cmd, exited
	return nil
}

// Shutdown stops the server as `redis-cli shutdown` does (the append-only
// file is flushed and synced first) and waits until the process has
// exited. A stopped server's clients get connection errors until Restart.
// Not safe to call concurrently with Kill or Restart.
func (s *Server) Shutdown() error {
	if s.exited == nil {
		return nil
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = c.Shutdown(ctx).Err() // the server closes the connection: the reply is an error
	select {
	case <-s.exited:
	case <-ctx.Done():
		_ = s.cmd.Process.Kill()
		<-s.exited
		s.exited = nil
		return fmt.Errorf("redistest: redis-server on %s did not exit within 10s of SHUTDOWN", s.Addr)
	}
	s.exited = nil
	return nil
}

// Kill stops the server with SIGKILL, as `kill -9` does: with AppendOnly,
// up to about a second of writes not yet synced is lost. It waits until the
// process has exited.
func (s *Server) Kill() error {
	if s.exited == nil {
		return nil
	}
	err := s.cmd.Process.Kill()
	<-s.exited
	s.exited = nil
	return err
}

// Restart starts the stopped server again on the same address and
// directory, loading what the append-only file kept, and waits until it
// answers PING (after loading). The error is redis-server's, or the port
// was taken meanwhile.
func (s *Server) Restart() error {
	if s.exited != nil {
		return fmt.Errorf("redistest: redis-server on %s is running", s.Addr)
	}
	return s.start()
}

// errExited is waitReady's error when redis-server exited before it
// answered (a port taken between the probe and the bind): waitReady has
// read the exit from exited, so the caller must not wait on it again.
var errExited = errors.New("redis-server exited")

// errPortTaken is waitReady's error when another redis-server answers on
// the port.
var errPortTaken = errors.New("port taken")

// infoField returns the value of field in an INFO reply ("" when absent).
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// waitReady waits until the server on addr answers PING, for 10 s, or
// until it exits (errExited, its exit read from exited). The server that
// answers must be process pid: another test's redis-server that bound the
// port between the probe and this one's bind answers PING too, while this
// one exits, and the test then loses its server when the other one stops
// (the likely cause of a TestSentinelFailsOver failure in a `make test` on
// a busy host).
func waitReady(addr string, pid int, exited <-chan error) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("%w: %v", errExited, err)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		if err == nil {
			var info string
			if info, err = c.Info(ctx, "server").Result(); err == nil {
				cancel()
				if got := infoField(info, "process_id"); got != strconv.Itoa(pid) {
					return fmt.Errorf("%w: %s is answered by another redis-server (process_id %s, this one %d)", errPortTaken, addr, got, pid)
				}
				return nil
			}
		}
		cancel()
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

// Pid is the redis-server's process ID (a wrapper's that execs it, such
// as make bench-scripts' valgrind, is the same process).
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// CallgrindDump has callgrind dump and zero the server's counters and
// returns the instructions it counted since the last dump; 0 when
// SLUICE_CALLGRIND_OUT is not set. make bench-scripts runs redis-server
// under callgrind, collecting inside Lua scripts only
// (--toggle-collect=luaCallFunction), its dumps in that directory: the
// count is a script's work, the same on a busy host as on an idle one.
func (s *Server) CallgrindDump(tb testing.TB) int64 {
	tb.Helper()
	dir := os.Getenv("SLUICE_CALLGRIND_OUT")
	if dir == "" {
		return 0
	}
	pid := strconv.Itoa(s.Pid())
	before, _ := filepath.Glob(filepath.Join(dir, "cg."+pid+".*"))
	if out, err := exec.Command("callgrind_control", "-d", pid).CombinedOutput(); err != nil {
		tb.Fatalf("callgrind_control -d %s: %v: %s", pid, err, out)
	}
	file := filepath.Join(dir, fmt.Sprintf("cg.%s.%d", pid, len(before)+1))
	src, err := os.ReadFile(file)
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.Lines(string(src)) {
		if v, ok := strings.CutPrefix(line, "totals: "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				tb.Fatalf("%s: totals %q: %v", file, v, err)
			}
			return n
		}
	}
	tb.Fatalf("%s: no totals line", file)
	return 0
}

// ScriptUsec sums the usec of cmdstat_evalsha and cmdstat_eval in the
// text of INFO commandstats: the µs Redis spent in scripts so far
// (wall-clock inside Redis, which a busy host inflates).
func ScriptUsec(commandstats string) float64 {
	var total float64
	for line := range strings.Lines(commandstats) {
		rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:")
		if !ok {
			rest, ok = strings.CutPrefix(line, "cmdstat_eval:")
		}
		if !ok {
			continue
		}
		for f := range strings.SplitSeq(strings.TrimSpace(rest), ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, _ := strconv.ParseFloat(v, 64)
				total += n
			}
		}
	}
	return total
}

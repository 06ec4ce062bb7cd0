package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// ownRedis starts the demo's own Redis and returns its URL, a name for
// the summary and a stop function: a private redis-server (no persistence,
// loopback, a free port) when one is installed and embedded is false, else
// an embedded miniredis. A redis-server runs the limiter's Lua scripts
// several times faster than miniredis's interpreter, in its own process:
// on a busy 2-core host that keeps the demo's sends on their slots.
func ownRedis(ctx context.Context, embedded bool, stderr io.Writer) (url, name string, stop func(), err error) {
	if !embedded {
		if bin, lerr := exec.LookPath("redis-server"); lerr == nil {
			url, stop, err := startRedisServer(ctx, bin)
			if err == nil {
				return url, "private redis-server (" + bin + ")", stop, nil
			}
			fmt.Fprintf(stderr, "demo: could not start %s (%v); using the embedded miniredis\n", bin, err)
		}
	}
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		return "", "", nil, fmt.Errorf("embedded redis: %w", err)
	}
	return "redis://" + m.Addr(), "embedded miniredis", m.Close, nil
}

// startRedisServer runs bin on a free loopback port, without persistence,
// and waits until it answers PING (10 s at most).
func startRedisServer(ctx context.Context, bin string) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir, err := os.MkdirTemp("", "sluice-demo-redis-")
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--loglevel", "warning", "--protected-mode", "yes")
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		_ = cmd.Process.Kill()
		<-exited
		os.RemoveAll(dir)
	}
	url := "redis://127.0.0.1:" + strconv.Itoa(port) + "/0"
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port)})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err
			stop()
			return "", nil, fmt.Errorf("exited: %v", err)
		default:
		}
		if c.Ping(ctx).Err() == nil {
			return url, stop, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			stop()
			return "", nil, errors.New("no answer to PING within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

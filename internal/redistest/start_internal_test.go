package redistest

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
)

// A redis-server that exits before it answers (here the port is taken,
// as when another process binds it between the probe and the bind) makes
// start return an error at once, for StartWith to try another port. It
// used to wait forever: waitReady had read the exit from the channel that
// start then waited on again.
func TestStartReportsAServerThatExited(t *testing.T) {
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // (each PING fails at once, not after go-redis's timeouts)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	s := &Server{Addr: ln.Addr().String(), bin: bin, dir: t.TempDir()}
	err = s.start()
	if err == nil {
		_ = s.Kill()
		t.Fatal("redis-server started on a port another socket holds")
	}
	if !strings.Contains(err.Error(), "exited") {
		t.Fatalf("start: %v, want the exit", err)
	}
	if s.exited != nil {
		t.Fatal("a server that exited is kept as running")
	}
}

// A port another test's redis-server holds answers PING as this one's
// would, while this one exits: start must see that the server answering
// is not its own process and return an error, for StartWith to try
// another port, not keep a server that is someone else's.
func TestStartDoesNotTakeAnotherServerForItsOwn(t *testing.T) {
	other := Start(t)
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Addr: other.Addr, bin: bin, dir: t.TempDir()}
	err = s.start()
	if err == nil {
		_ = s.Kill()
		t.Fatal("start took the redis-server of another test for its own")
	}
	if !strings.Contains(err.Error(), "exited") && !strings.Contains(err.Error(), "another redis-server") {
		t.Fatalf("start: %v, want the exit or the other server", err)
	}
	if s.exited != nil {
		t.Fatal("a server that is not running is kept as running")
	}
	if err := other.Client(t).Ping(context.Background()).Err(); err != nil {
		t.Fatalf("the other server: %v", err)
	}
	// The check itself, without the race between the two processes: a
	// server that answers as another process is not ready.
	if err := waitReady(other.Addr, os.Getpid(), make(chan error)); !errors.Is(err, errPortTaken) {
		t.Fatalf("waitReady on another process's server: %v, want errPortTaken", err)
	}
}

package redistest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of private redis-servers on free loopback
// ports: Masters share the 16,384 slots in even ranges, and each master
// has Replicas[i] replicas (none unless StartCluster asks), so that a
// test can kill a master and watch its replica take over.
type Cluster struct {
	Masters  []*Server
	Replicas [][]*Server // Replicas[i] follow Masters[i]
}

// NodeTimeout is the cluster-node-timeout of StartCluster's servers:
// a master unreachable this long is failed, and its replica promoted,
// within about twice it.
const NodeTimeout = 1500 * time.Millisecond

// Addrs are the masters' addresses, the seed nodes a client needs.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Masters))
	for i, m := range c.Masters {
		out[i] = m.Addr
	}
	return out
}

// Client returns a cluster client on c, closed at test cleanup.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), DialTimeout: 500 * time.Millisecond,
		ClusterStateReloadInterval: time.Second}) // (go-redis reloads on MOVED, else every minute)
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// StartCluster starts masters redis-servers in cluster mode (at least
// 3, as Redis Cluster wants for failover) with replicas replicas each,
// joins them and waits until every node reports cluster_state:ok.
func StartCluster(tb testing.TB, masters, replicas int) *Cluster {
	tb.Helper()
	if masters < 1 {
		tb.Fatal("redistest: StartCluster wants at least one master")
	}
	opts := Options{Args: []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.Itoa(int(NodeTimeout / time.Millisecond)),
		"--cluster-require-full-coverage", "yes", "--appendonly", "no", "--loglevel", "notice"}}
	c := &Cluster{Replicas: make([][]*Server, masters)}
	for range masters {
		c.Masters = append(c.Masters, StartWith(tb, opts))
	}
	for i := range masters {
		for range replicas {
			c.Replicas[i] = append(c.Replicas[i], StartWith(tb, opts))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.join(ctx); err != nil {
		tb.Fatalf("redistest: cluster: %v", err)
	}
	return c
}

func (c *Cluster) all() []*Server {
	out := append([]*Server(nil), c.Masters...)
	for _, rs := range c.Replicas {
		out = append(out, rs...)
	}
	return out
}

func (c *Cluster) join(ctx context.Context) error {
	first := node(c.Masters[0].Addr)
	defer first.Close()
	for _, s := range c.all()[1:] {
		host, port, _ := net.SplitHostPort(s.Addr)
		p, _ := strconv.Atoi(port)
		if err := first.ClusterMeet(ctx, host, strconv.Itoa(p)).Err(); err != nil {
			return fmt.Errorf("CLUSTER MEET %s: %w", s.Addr, err)
		}
	}
	per := 16384 / len(c.Masters)
	for i, m := range c.Masters {
		lo, hi := i*per, (i+1)*per-1
		if i == len(c.Masters)-1 {
			hi = 16383
		}
		slots := make([]int, 0, hi-lo+1)
		for s := lo; s <= hi; s++ {
			slots = append(slots, s)
		}
		n := node(m.Addr)
		err := n.ClusterAddSlots(ctx, slots...).Err() // (ADDSLOTSRANGE is Redis 7's)
		n.Close()
		if err != nil {
			return fmt.Errorf("CLUSTER ADDSLOTS on %s: %w", m.Addr, err)
		}
	}
	for i, rs := range c.Replicas {
		mid, err := nodeID(ctx, c.Masters[i].Addr)
		if err != nil {
			return err
		}
		for _, r := range rs {
			if err := waitFor(ctx, func() error {
				n := node(r.Addr)
				defer n.Close()
				return n.ClusterReplicate(ctx, mid).Err() // fails until the replica has met the master
			}); err != nil {
				return fmt.Errorf("CLUSTER REPLICATE on %s: %w", r.Addr, err)
			}
		}
	}
	if err := c.WaitOK(ctx); err != nil {
		return err
	}
	// a replica that never synced counts its data as too old to take over
	for _, rs := range c.Replicas {
		for _, r := range rs {
			if err := waitFor(ctx, func() error { return linkUp(ctx, r.Addr) }); err != nil {
				return fmt.Errorf("replica %s: %w", r.Addr, err)
			}
		}
	}
	return nil
}

// WaitReplicated waits until every running replica of c has every write
// its master had when it was called (master_repl_offset equal on both): a
// test that kills a master right after writing otherwise loses the writes
// Redis had not replicated yet, as Redis does.
func (c *Cluster) WaitReplicated(ctx context.Context) error {
	for i, m := range c.Masters {
		if m.exited == nil {
			continue
		}
		want, err := replOffset(ctx, m.Addr)
		if err != nil {
			return err
		}
		for _, r := range c.Replicas[i] {
			if err := waitFor(ctx, func() error {
				got, err := replOffset(ctx, r.Addr)
				if err == nil && got < want {
					err = fmt.Errorf("%s: at offset %d of %d", r.Addr, got, want)
				}
				return err
			}); err != nil {
				return err
			}
		}
	}
	return nil
}

// replOffset is master_repl_offset from the server's INFO replication.
func replOffset(ctx context.Context, addr string) (int64, error) {
	n := node(addr)
	defer n.Close()
	info, err := n.Info(ctx, "replication").Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "master_repl_offset:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no master_repl_offset in INFO replication", addr)
}

// linkUp reports whether the replica at addr has synced with its master.
func linkUp(ctx context.Context, addr string) error {
	n := node(addr)
	defer n.Close()
	info, err := n.Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "master_link_status:up") {
		return fmt.Errorf("%s: not synced with its master yet", addr)
	}
	return nil
}

// WaitOK waits until every running node of c reports cluster_state:ok and
// the same number of known nodes.
func (c *Cluster) WaitOK(ctx context.Context) error {
	return waitFor(ctx, func() error {
		for _, s := range c.all() {
			if s.exited == nil {
				continue // stopped by the test
			}
			n := node(s.Addr)
			info, err := n.ClusterInfo(ctx).Result()
			n.Close()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("%s: not ok yet", s.Addr)
			}
		}
		return nil
	})
}

// nodeID is the cluster node ID of the server at addr.
func nodeID(ctx context.Context, addr string) (string, error) {
	n := node(addr)
	defer n.Close()
	return n.ClusterMyID(ctx).Result()
}

func node(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 500 * time.Millisecond})
}

// waitFor polls f every 50 ms until it returns nil or ctx ends (a cluster
// forming or a failover has no signal to wait on but its state).
func waitFor(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Sentinel is a master, a replica and one Sentinel that monitors the
// master as MasterName, each a private redis-server on a free loopback
// port: a test can stop the master and the Sentinel promotes the replica.
type Sentinel struct {
	Master, Replica *Server
	Sentinel        *Server
	MasterName      string
}

// DownAfter is StartSentinel's down-after-milliseconds: the Sentinel
// fails over a master unreachable this long.
const DownAfter = time.Second

// StartSentinel starts the master, its replica and the Sentinel, and waits
// until the Sentinel knows the replica.
func StartSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	st := &Sentinel{MasterName: "sluice-test"}
	st.Master = Start(tb)
	mhost, mport, _ := net.SplitHostPort(st.Master.Addr)
	st.Replica = StartWith(tb, Options{Args: []string{"--replicaof", mhost, mport}})
	conf := fmt.Sprintf("sentinel monitor %s %s %s 1\nsentinel down-after-milliseconds %s %d\nsentinel failover-timeout %s 10000\n",
		st.MasterName, mhost, mport, st.MasterName, DownAfter.Milliseconds(), st.MasterName)
	st.Sentinel = StartWith(tb, Options{ConfigFile: conf, Args: []string{"--sentinel"}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sc := redis.NewSentinelClient(&redis.Options{Addr: st.Sentinel.Addr})
	defer sc.Close()
	if err := waitFor(ctx, func() error {
		rs, err := sc.Replicas(ctx, st.MasterName).Result()
		if err != nil {
			return err
		}
		if len(rs) == 0 {
			return fmt.Errorf("the Sentinel knows no replica yet")
		}
		return linkUp(ctx, st.Replica.Addr)
	}); err != nil {
		tb.Fatalf("redistest: sentinel: %v", err)
	}
	return st
}

// Client returns a failover client that follows the master through the
// Sentinel, closed at test cleanup.
func (st *Sentinel) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: st.MasterName, SentinelAddrs: []string{st.Sentinel.Addr}})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

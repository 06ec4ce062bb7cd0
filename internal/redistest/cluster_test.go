package redistest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A 3-master cluster spreads keys over its masters, and a master killed
// is replaced by its replica.
func TestClusterSpreadsAndFailsOver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six redis-servers")
	}
	t.Parallel()
	c := StartCluster(t, 3, 1)
	cc := c.Client(t)
	ctx := context.Background()
	for i := range 30 {
		if err := cc.Set(ctx, fmt.Sprintf("k%d", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var holding atomic.Int32 // (ForEachMaster calls on each master at once)
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		if n, err := m.DBSize(ctx).Result(); err != nil {
			return err
		} else if n > 0 {
			holding.Add(1)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if holding := holding.Load(); holding != 3 {
		t.Fatalf("keys on %d masters, want 3", holding)
	}
	// kill the first master once its replica has its writes; the replica
	// takes its slots over
	if err := c.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Masters[0].Kill(); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.WaitOK(wctx); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(wctx, func() error {
		actx, cancel := context.WithTimeout(wctx, 3*time.Second)
		defer cancel()
		for i := range 30 {
			if err := cc.Get(actx, fmt.Sprintf("k%d", i)).Err(); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		n := node(c.Masters[1].Addr)
		nodes, _ := n.ClusterNodes(ctx).Result()
		n.Close()
		t.Logf("the cluster as master 1 sees it:\n%s", nodes)
		t.Fatalf("after the failover: %v", err)
	}
}

// The Sentinel promotes the replica when the master stops, and a failover
// client follows it.
func TestSentinelFailsOver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three redis-servers")
	}
	t.Parallel()
	st := StartSentinel(t)
	c := st.Client(t)
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := st.Master.Kill(); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := waitFor(wctx, func() error {
		return c.Set(wctx, "k2", "v", 0).Err() // the old master is gone: a write succeeds on the promoted replica only
	}); err != nil {
		t.Fatalf("no write after the failover: %v", err)
	}
}

package testutil

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/internal/redistest"
)

// Backends runs f, in parallel subtests, against a private redis-server
// and against miniredis (the demo's embedded Redis): the limiter's Lua must
// behave the same on both. With SLUICE_TEST_CLUSTER=1 (`make test-cluster`)
// also against a 3-master Redis Cluster and through a Sentinel to its
// master, each started for the test: every script's keys must share a
// slot, and the decisions must be the same.
func Backends(t *testing.T, f func(t *testing.T, rdb redis.UniversalClient)) {
	t.Run("redis-server", func(t *testing.T) {
		t.Parallel()
		f(t, redistest.Start(t).Client(t))
	})
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		f(t, c)
	})
	if os.Getenv("SLUICE_TEST_CLUSTER") != "1" {
		return
	}
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		f(t, redistest.StartCluster(t, 3, 0).Client(t))
	})
	t.Run("sentinel", func(t *testing.T) {
		t.Parallel()
		f(t, redistest.StartSentinel(t).Client(t))
	})
}

// Counter is the value of the counter series name in reg whose label is
// value (0 when there is none).
func Counter(t testing.TB, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// AllKeys is KEYS pattern on every master of rdb (one server's, or each of
// a cluster's): a test's private servers hold few keys.
func AllKeys(ctx context.Context, rdb redis.UniversalClient, pattern string) ([]string, error) {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return rdb.Keys(ctx, pattern).Result()
	}
	var mu sync.Mutex
	var all []string
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		keys, err := c.Keys(ctx, pattern).Result()
		mu.Lock()
		all = append(all, keys...)
		mu.Unlock()
		return err
	})
	return all, err
}

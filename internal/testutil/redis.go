package testutil

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/internal/redistest"
)

// Backends runs f, in parallel subtests, against a private redis-server
// and against miniredis (the demo's embedded Redis): the limiter's Lua must
// behave the same on both.
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

package app

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/redistest"
)

// Connect builds the client redis.mode names and checks what it reached:
// a cluster (every master, its state ok), a Sentinel's master; and a
// single-server URL that turns out to be a cluster node or a Sentinel is
// refused with what to configure instead, not taken for a server that
// PINGs and then fails every script.
func TestConnectByMode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six redis-servers")
	}
	t.Parallel()
	ctx := context.Background()
	cl := redistest.StartCluster(t, 3, 0)
	st := redistest.StartSentinel(t)

	cfg := config.Default()
	cfg.Redis = config.RedisConfig{Mode: config.RedisCluster, Addrs: cl.Addrs()[:1], KeyPrefix: "sluice"}
	c, err := Connect(ctx, cfg, nil)
	require.NoError(t, err)
	_, isCluster := c.(*redis.ClusterClient)
	require.True(t, isCluster)
	require.NoError(t, c.Set(ctx, "{a}k", 1, 0).Err())
	require.NoError(t, c.Set(ctx, "{b}k", 1, 0).Err(), "a key in another master's slot is reached too")
	require.NoError(t, c.Close())

	cfg.Redis = config.RedisConfig{Mode: config.RedisSentinel, Addrs: []string{st.Sentinel.Addr}, MasterName: st.MasterName, KeyPrefix: "sluice"}
	c, err = Connect(ctx, cfg, nil)
	require.NoError(t, err)
	require.NoError(t, c.Set(ctx, "k", 1, 0).Err())
	require.NoError(t, c.Close())

	cfg.Redis.MasterName = "nosuch"
	_, err = Connect(ctx, cfg, nil)
	require.ErrorContains(t, err, "redis sentinel at "+st.Sentinel.Addr)

	_, err = ConnectURL(ctx, "redis://"+cl.Masters[0].Addr+"/0")
	require.ErrorContains(t, err, "this is a Redis Cluster node: set redis.mode: cluster")
	_, err = ConnectURL(ctx, "redis://"+st.Sentinel.Addr+"/0")
	require.ErrorContains(t, err, "this is a Sentinel, which holds no data: set redis.mode: sentinel")

	cfg.Redis = config.RedisConfig{Mode: config.RedisCluster, Addrs: cl.Addrs(), PasswordEnv: "NO_SUCH_VAR_SET"}
	_, err = Connect(ctx, cfg, func(string) (string, error) { return "", errNotSet })
	require.ErrorContains(t, err, "redis.password_env: not set")
}

var errNotSet = errString("not set")

type errString string

func (e errString) Error() string { return string(e) }

func TestCheckVersion(t *testing.T) {
	require.NoError(t, checkVersion("# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n"))
	require.NoError(t, checkVersion("redis_version:6.0.0\r\n"))
	require.ErrorContains(t, checkVersion("redis_version:5.0.14\r\n"), "Redis 5.0.14: Sluice needs Redis 6.0 or later (its scripts use SET KEEPTTL)")
	require.ErrorContains(t, checkVersion("redis_version:x\r\n"), "not a version")
}

// /healthz on a cluster: 200 while every master answers and the state is
// ok; 503 once a master without a replica is gone, naming no address.
func TestHealthzOnACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three redis-servers")
	}
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	h := HTTPHandler(cl.Client(t), prometheus.NewRegistry())
	get := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/healthz", nil))
		return w
	}
	require.Equal(t, 200, get().Code)
	require.NoError(t, cl.Masters[2].Kill())
	// The other masters mark it failed after the node timeout; until then
	// the ping of every master already fails.
	w := get()
	require.Equal(t, 503, w.Code)
	require.Regexp(t, `^redis: (a cluster master is unavailable|cluster state is not ok|unavailable)\n$`, w.Body.String())
	require.NotContains(t, w.Body.String(), "127.0.0.1")
}

// redis.tls: a cluster reached over TLS only, its node's certificate
// verified against redis.tls_ca_file; without the authority, or for another
// name, Connect refuses with the certificate's error.
func TestConnectClusterOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a redis-server")
	}
	t.Parallel()
	ctx := context.Background()
	cl := redistest.StartTLSCluster(t)
	cfg := config.Default()
	cfg.Redis = config.RedisConfig{Mode: config.RedisCluster, Addrs: []string{cl.TLSAddr}, TLS: true, TLSCAFile: cl.CAFile, KeyPrefix: "sluice"}
	c, err := Connect(ctx, cfg, nil)
	require.NoError(t, err)
	require.NoError(t, c.Set(ctx, "{a}k", 1, 0).Err())
	addrs, err := c.(*redis.ClusterClient).ClusterSlots(ctx).Result()
	require.NoError(t, err)
	require.Equal(t, cl.TLSAddr, addrs[0].Nodes[0].Addr, "the slot map names the TLS port, the only one a client dials")
	require.NoError(t, c.Close())

	cfg.Redis.TLSCAFile = "" // the system's authorities do not know the test's
	_, err = Connect(ctx, cfg, nil)
	require.ErrorContains(t, err, "certificate signed by unknown authority")

	cfg.Redis.TLSCAFile, cfg.Redis.TLSServerName = cl.CAFile, "redis.example.com"
	_, err = Connect(ctx, cfg, nil)
	require.ErrorContains(t, err, "redis.example.com")

	cfg.Redis.TLS, cfg.Redis.TLSServerName = false, ""
	_, err = Connect(ctx, cfg, nil)
	require.Error(t, err, "plain Redis to a TLS port")
}

// redis.tls through a Sentinel: the Sentinel and the master it names are
// both reached over TLS, each certificate verified.
func TestConnectSentinelOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two redis-servers")
	}
	t.Parallel()
	ctx := context.Background()
	st := redistest.StartTLSSentinel(t)
	cfg := config.Default()
	cfg.Redis = config.RedisConfig{Mode: config.RedisSentinel, Addrs: []string{st.SentinelTLS}, MasterName: st.MasterName,
		TLS: true, TLSCAFile: st.CAFile, KeyPrefix: "sluice"}
	c, err := Connect(ctx, cfg, nil)
	require.NoError(t, err)
	require.NoError(t, c.Set(ctx, "k", "over tls", 0).Err())
	require.NoError(t, c.Close())
	v, err := st.Master.Client(t).Get(ctx, "k").Result()
	require.NoError(t, err)
	require.Equal(t, "over tls", v, "the write reached the master")

	cfg.Redis.TLSCAFile = ""
	_, err = Connect(ctx, cfg, nil)
	require.ErrorContains(t, err, "certificate signed by unknown authority")
}

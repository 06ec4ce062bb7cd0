package throttle_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/throttle"
)

// Pub/sub is server-wide: a pause announced by a deployment on one
// database of a Redis server must not reach a deployment on another, which
// would hold its own sends for a scope it never paused.
func TestPauseAnnouncementsStayInTheirDatabase(t *testing.T) {
	srv := redistest.Start(t)
	client := func(db int) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, DB: db})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	opts := throttle.Options{OverrideRefresh: -1}
	on0, peer0 := throttle.NewRedis(client(0), opts), throttle.NewRedis(client(0), opts)
	on1, peer1 := throttle.NewRedis(client(1), opts), throttle.NewRedis(client(1), opts)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	heard0, heard1 := watchPauses(ctx, t, on0), watchPauses(ctx, t, on1)
	pause := throttle.PauseKey("wa", "sender", "1")
	other := throttle.PauseKey("wa", "sender", "2")
	// db 1 pauses number 1, then db 0 pauses number 2. Redis runs the two
	// PUBLISHes in this order, so db 0's watcher would hear number 1 first
	// if db 1's announcement reached it.
	if _, err := on1.Pause(ctx, pause, throttle.PauseOptions{Wait: time.Hour, Code: 131048}); err != nil {
		t.Fatal(err)
	}
	if _, err := peer0.Pause(ctx, other, throttle.PauseOptions{Wait: time.Hour, Code: 131048}); err != nil {
		t.Fatal(err)
	}
	if got := nextPause(t, heard0); got != other {
		t.Fatalf("db 0 heard %q first; want only its own database's pause %q (db 1 paused %q)", got, other, pause)
	}
	// The same database hears its pause.
	if got := nextPause(t, heard1); got != pause {
		t.Fatalf("db 1 heard %q; want its pause %q", got, pause)
	}
	// db 0's sends on number 1 are not held: it is not paused there.
	reqs := []throttle.Request{{Key: "wa:number:1", Limit: mps80}, throttle.PauseRequest(pause)}
	if r, err := on0.Reserve(ctx, throttle.ReserveOptions{TaskID: "t0"}, reqs...); err != nil || !r.Firm {
		t.Fatalf("db 0, number 1: firm %v blocked by %q, err %v; want firm", r.Firm, r.BlockedBy, err)
	}
	if r, err := peer1.Reserve(ctx, throttle.ReserveOptions{TaskID: "t0"}, reqs...); err != nil || r.BlockedBy != throttle.PauseName {
		t.Fatalf("db 1, number 1: blocked by %q, err %v; want %q", r.BlockedBy, err, throttle.PauseName)
	}
}

// watchPauses starts l.WatchPauses and returns once its subscription is live
// (PUBSUB NUMSUB counts it); the keys it hears come on the channel.
func watchPauses(ctx context.Context, t *testing.T, l *throttle.Redis) <-chan string {
	t.Helper()
	rdb := l.Client()
	ch := l.PausesChannel()
	before, err := rdb.PubSubNumSub(ctx, ch).Result()
	if err != nil {
		t.Fatal(err)
	}
	heard := make(chan string, 16)
	go func() { _ = l.WatchPauses(ctx, func(key string, _ time.Duration) { heard <- key }) }()
	deadline := time.Now().Add(5 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		n, err := rdb.PubSubNumSub(ctx, ch).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n[ch] > before[ch] {
			return heard
		}
		if time.Now().After(deadline) {
			t.Fatalf("watcher not subscribed to %s after 5s", ch)
		}
		<-tick.C
	}
}

func nextPause(t *testing.T, heard <-chan string) string {
	t.Helper()
	select {
	case k := <-heard:
		return k
	case <-time.After(5 * time.Second):
		t.Fatal("no pause announcement within 5s")
		return ""
	}
}

// While a fleet is upgraded, workers of the release before issue 21 watch
// "<prefix>:{_pauses}": a pause announced now reaches them there too, so
// they stop the sends they hold for the paused scope.
func TestPauseIsAnnouncedOnTheEarlierReleasesChannel(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	l := throttle.NewRedis(rdb, throttle.Options{Prefix: "up", OverrideRefresh: -1})
	sub := rdb.Subscribe(ctx, "up:{_pauses}")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	pause := throttle.PauseKey("wa", "sender", "1")
	if _, err := l.Pause(ctx, pause, throttle.PauseOptions{Wait: time.Minute, Code: 130429}); err != nil {
		t.Fatal(err)
	}
	m, err := sub.ReceiveMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if key, _, _ := strings.Cut(m.Payload, " "); key != pause {
		t.Fatalf("the earlier release's channel heard %q; want %q", m.Payload, pause)
	}
}

// On a Redis Cluster a PUBLISH reaches the subscribers of every node: a
// pause announced through one master (here of a spread scope, a number's)
// reaches workers whose subscriptions landed on each of the others.
func TestPauseAnnouncementsReachEveryNodeOfACluster(t *testing.T) {
	if os.Getenv("SLUICE_TEST_CLUSTER") != "1" {
		t.Skip("a Redis Cluster test: SLUICE_TEST_CLUSTER=1 (make test-cluster)")
	}
	c := redistest.StartCluster(t, 3, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := throttle.Options{OverrideRefresh: -1}
	var heard []<-chan string
	for _, addr := range c.Addrs() {
		node := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = node.Close() })
		heard = append(heard, watchPauses(ctx, t, throttle.NewRedis(node, opts)))
	}
	require.Len(t, heard, 3)
	l := throttle.NewRedis(c.Client(t), opts)
	pause := throttle.PauseKey("wa/1", "sender", "1")
	_, err := l.Pause(ctx, pause, throttle.PauseOptions{Wait: time.Hour, Code: 130429})
	require.NoError(t, err)
	for i, h := range heard {
		require.Equal(t, pause, nextPause(t, h), "the subscriber on node %d", i)
	}
}

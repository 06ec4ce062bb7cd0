package throttle_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/internal/testutil"
	"github.com/sluice-dev/sluice/throttle"
)

// A send whose number is spread to a scope of its own ("wa/1", on a Redis
// Cluster a master of its own) keeps its recipient's daily window, its
// account's concurrency and its channel's pause in the channel's scope
// ("wa"). On a cluster Reserve paces the number in one script, then takes
// the others only for a firm slot; on one Redis one script decides all.
// Either way a send they block is not sent and takes nothing from them.
func TestReserveDecidesOtherScopesAfterAFirmSlot(t *testing.T) {
	testutil.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		clock := testutil.NewClock(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
		l := throttle.NewRedis(rdb, throttle.Options{Clock: clock.Now, OverrideRefresh: -1})
		number := throttle.Request{Key: "wa/1:number:1", Limit: mps80}
		window := throttle.Request{Key: "wa:daily:+15550100", Limit: daily} // 2 a day
		account := throttle.Request{Key: "wa:account:A", Limit: throttle.Limit{Name: "concurrency", Algorithm: throttle.Concurrency, Max: 1, Lease: time.Minute}}
		send := []throttle.Request{window, number, throttle.PauseRequest("wa:paused:channel"), account}
		require.True(t, throttle.Reservable(send))

		r, err := l.Reserve(ctx, throttle.ReserveOptions{TaskID: "a"}, send...)
		require.NoError(t, err)
		require.True(t, r.Firm, "first send: %+v", r)
		require.Len(t, r.Limits, 4)
		require.Equal(t, "daily", r.Limits[0].Name)
		require.Equal(t, int64(1), r.Limits[0].Taken)
		require.Equal(t, int64(1), r.Limits[0].Remaining)
		require.Equal(t, "throughput", r.Limits[1].Name)
		require.Len(t, r.Leases, 1, "the account's lease, taken in its scope")
		require.Equal(t, "wa:account:A", r.Leases[0].Key)

		// The account's one lease is held: the second send is not sent,
		// and the window is not counted for it.
		r2, err := l.Reserve(ctx, throttle.ReserveOptions{TaskID: "b"}, send...)
		require.NoError(t, err)
		require.False(t, r2.Firm)
		require.False(t, r2.Planned)
		require.Equal(t, "concurrency", r2.BlockedBy)
		require.Empty(t, r2.Leases)
		require.Equal(t, int64(1), r2.Limits[0].Remaining, "the window gave back what it took for a send that did not go")
		require.True(t, r2.At.After(r2.Now), "comes back after the lease's wait")

		require.NoError(t, l.Release(ctx, r.Leases))
		r3, err := l.Reserve(ctx, throttle.ReserveOptions{TaskID: "b"}, send...)
		require.NoError(t, err)
		require.True(t, r3.Firm, "%+v", r3)
		require.NoError(t, l.Release(ctx, r3.Leases))
		require.False(t, r3.At.Before(r.At.Add(mps80.Rate.Interval())), "the number's slots stay paced: %v then %v", r.At, r3.At)

		// A send whose pair is not free for 6 s is planned, not sent: its
		// recipient's window is not charged for it (on a cluster it was
		// taken before the slot and is refunded).
		pairSend := []throttle.Request{number, {Key: "wa/1:pair:1:+15550122", Limit: pair6}, {Key: "wa:daily:+15550122", Limit: daily}}
		p1, err := l.Reserve(ctx, throttle.ReserveOptions{TaskID: "p1"}, pairSend...)
		require.NoError(t, err)
		require.True(t, p1.Firm)
		require.Equal(t, int64(1), p1.Limits[2].Remaining)
		p2, err := l.Reserve(ctx, throttle.ReserveOptions{TaskID: "p2"}, pairSend...)
		require.NoError(t, err)
		require.False(t, p2.Firm, "the pair's next slot is 6 s on")
		require.Zero(t, p2.Limits[2].Taken)
		st, err := l.Status(ctx, pairSend[2])
		require.NoError(t, err)
		require.Equal(t, int64(1), st.Remaining, "the window counts only the send that went")
		released, err := l.ReleasePlanned(ctx, throttle.Send{TaskID: "p2", Requests: pairSend})
		require.NoError(t, err)
		require.True(t, released, "p2 held a place")

		// The window is full: blocked by it until the day ends.
		r4, err := l.Reserve(ctx, throttle.ReserveOptions{TaskID: "c"}, send...)
		require.NoError(t, err)
		require.False(t, r4.Firm)
		require.Equal(t, "daily", r4.BlockedBy)
		require.True(t, r4.At.Equal(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)), "comes back at %v, when the day ends", r4.At)

		// A pause of the channel, in the channel's scope, holds a send of
		// another recipient until it ends.
		_, err = l.Pause(ctx, "wa:paused:channel", throttle.PauseOptions{Wait: 30 * time.Second})
		require.NoError(t, err)
		other := []throttle.Request{number, {Key: "wa:daily:+15550111", Limit: daily}, throttle.PauseRequest("wa:paused:channel")}
		r5, err := l.Reserve(ctx, throttle.ReserveOptions{TaskID: "d"}, other...)
		require.NoError(t, err)
		require.False(t, r5.Firm)
		require.Equal(t, throttle.PauseName, r5.BlockedBy)
		require.True(t, r5.At.Equal(clock.Now().Add(30*time.Second)), "comes back at %v, when the pause ends", r5.At)
		require.True(t, r5.Limits[1].Allowed)
		require.Zero(t, r5.Limits[1].Taken)

		// Planned at enqueue on the number's scope alone: the pause of
		// another scope is decided when the send comes back.
		ps, err := l.Plan(ctx, throttle.ReserveOptions{}, []throttle.Send{{TaskID: "e", Requests: other}})
		require.NoError(t, err)
		require.True(t, ps[0].New)
		require.True(t, ps[0].At.Before(clock.Now().Add(2*time.Second)), "planned at %v", ps[0].At)

		// The planned send comes back for its slot; the pause holds it.
		// On one Redis the send's requests are decided in one script,
		// which plans it from the pause's end; on a cluster the pause is
		// another master's, decided before the slot: the send comes back
		// when the pause ends, and keeps its place, taking no slot.
		clock.Set(ps[0].At)
		r6, err := l.Reserve(ctx, throttle.ReserveOptions{TaskID: "e"}, other...)
		require.NoError(t, err)
		require.False(t, r6.Firm)
		require.Equal(t, throttle.PauseName, r6.BlockedBy)
		require.False(t, r6.At.Before(clock.Now().Add(29*time.Second)), "comes back at %v, when the pause ends", r6.At)
		b, err := l.Backlog(ctx, number.Key)
		require.NoError(t, err)
		if _, cluster := rdb.(*redis.ClusterClient); cluster {
			require.False(t, r6.Planned)
			require.Equal(t, int64(1), b.Planned, "e keeps its place")
		} else {
			require.True(t, r6.Planned)
			require.Equal(t, int64(2), b.Planned, "d and e planned from the pause's end")
		}
	})
}

// A window fast enough to prefetch, in the channel's scope beside a
// spread number: each send takes one unit of it, however the calls are
// made (a prefetch there would take units no one hands out).
func TestReserveTakesOneUnitOfAFastWindowInAnotherScope(t *testing.T) {
	testutil.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		clock := testutil.NewClock(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
		l := throttle.NewRedis(rdb, throttle.Options{Clock: clock.Now, OverrideRefresh: -1, PrefetchSpan: 50 * time.Millisecond})
		window := throttle.Request{Key: "wa:minute:A", Limit: throttle.Limit{Name: "minute", Algorithm: throttle.FixedWindow, Rate: throttle.Rate{Limit: 1_000_000, Period: time.Minute}}}
		for i := range 3 {
			number := throttle.Request{Key: fmt.Sprintf("wa/%d:number:%d", i, i), Limit: mps80}
			r, err := l.Reserve(ctx, throttle.ReserveOptions{TaskID: fmt.Sprint("s", i)}, number, window)
			require.NoError(t, err)
			require.True(t, r.Firm)
		}
		st, err := l.Status(ctx, window)
		require.NoError(t, err)
		require.Equal(t, int64(1_000_000-3), st.Remaining, "three sends, three units")
	})
}

// A send's GCRA limits are decided in one script: they must share a scope.
func TestReserveRefusesGCRALimitsOfTwoScopes(t *testing.T) {
	l, _ := reserveLimiter(t)
	send := []throttle.Request{{Key: "wa/1:number:1", Limit: mps80}, {Key: "wa:pair:1:+15550100", Limit: pair6}}
	require.False(t, throttle.Reservable(send))
	_, err := l.Reserve(context.Background(), throttle.ReserveOptions{}, send...)
	require.ErrorIs(t, err, throttle.ErrBadRequest)
	require.ErrorContains(t, err, `outside scope "wa/1"`)
	_, err = l.Plan(context.Background(), throttle.ReserveOptions{}, []throttle.Send{{TaskID: "a", Requests: send}})
	require.ErrorIs(t, err, throttle.ErrBadRequest)
}

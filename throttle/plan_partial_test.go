package throttle_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/throttle"
)

// A Plan that fails on a later batch (of 256 sends) returns the places
// the earlier batches took, so that the caller can give them back. The
// failed call's own writes before its error stay (a Redis script is not
// undone by an error): those places are the cleanup job's to sweep, once
// their tasks are found missing.
func TestPlanFailingLaterReturnsThePlacesTaken(t *testing.T) {
	l, _ := reserveLimiter(t)
	ctx := context.Background()
	sender := throttle.Limit{Name: "sender", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(80), Burst: 1}
	const n = 300
	sends := make([]throttle.Send, n)
	for i := range sends {
		sends[i] = throttle.Send{TaskID: fmt.Sprint("t", i), Requests: []throttle.Request{
			{Key: "wa:number:1", Limit: sender},
			{Key: fmt.Sprintf("wa:pair:1:+1202555%04d", i), Limit: pair6},
		}}
	}
	// The 280th send's pair key holds a list: the second batch's script
	// call fails with WRONGTYPE.
	bad := l.Key("wa:pair:1:+12025550280")
	for _, k := range []string{bad, bad + "|plan", bad + "|backlog"} {
		require.NoError(t, l.Client().RPush(ctx, k, "x").Err())
	}
	ps, err := l.Plan(ctx, throttle.ReserveOptions{}, sends)
	// Redis's own error, with its code first (reserve.lua runs its body
	// under pcall and keeps a command's error as it was: go-redis reads the
	// code, READONLY after a failover).
	var rerr redis.Error
	require.ErrorAs(t, err, &rerr)
	require.True(t, strings.HasPrefix(rerr.Error(), "WRONGTYPE "), "error reply %q", rerr.Error())
	require.Len(t, ps, n, "the places taken come back with the error")
	taken := 0
	for i, p := range ps {
		if p.New {
			taken++
			_, err := l.ReleasePlanned(ctx, sends[i])
			require.NoError(t, err)
		}
	}
	require.Equal(t, 256, taken, "the first batch was planned")
	b, err := l.Backlog(ctx, "wa:number:1")
	require.NoError(t, err)
	require.Equal(t, int64(280-256), b.Planned, "only the failed call's places before its error are left")
}

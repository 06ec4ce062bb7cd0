package control_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/control"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/throttle"
)

// The keys control writes are not limiter keys: the limiter's listing
// (`sluice limits list`, the cleanup job's walk) shows the limit and none
// of them.
func TestControlKeysAreNotListedAsLimits(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	l := throttle.NewRedis(rdb, throttle.Options{Prefix: "sluice"})
	lim := throttle.Limit{Name: "sender", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(1)}
	_, err := l.Consume(ctx, throttle.Request{Key: "sms:sender:+12025550100", Limit: lim})
	require.NoError(t, err)
	for _, k := range []string{
		control.FirstFailureKey("sluice", "sms", "01JD3"),
		control.ClaimKey("sluice", "order-7"),
		control.ClaimBackfillKey("sluice"),
		control.DeliveryRecordKey("sluice", "01JD3"),
	} {
		require.NoError(t, rdb.Set(ctx, k, "1", 0).Err())
	}
	keys, _, err := l.List(ctx, "", 0, 100)
	require.NoError(t, err)
	require.Equal(t, []string{"sms:sender:+12025550100"}, keys)
}

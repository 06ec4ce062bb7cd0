package throttle

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
)

func TestOccasionalCountsWhatItHoldsBack(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	o := &occasional{every: rate.Sometimes{Interval: time.Hour}}
	for range 3 {
		o.warn(context.Background(), log, "m", "key", "k")
	}
	o.every = rate.Sometimes{Interval: time.Hour} // as if the hour had passed
	o.warn(context.Background(), log, "m", "key", "k")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2)
	var first, second map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &first))
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &second))
	require.NotContains(t, first, "suppressed")
	require.Equal(t, float64(2), second["suppressed"], "the two held back")
	require.Equal(t, "k", second["key"])
}

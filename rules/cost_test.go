package rules

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/throttle"
)

var smsFields = []string{"from", "messaging_service_sid", "to", "sender", "account_sid", "segments"}

func TestCostFieldRequests(t *testing.T) {
	t.Parallel()
	sender := throttle.Limit{Name: "sender", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(1), Burst: 1}
	wide := throttle.Limit{Name: "wide", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(10), Burst: 5}
	window := throttle.Limit{Name: "window", Algorithm: throttle.FixedWindow, Rate: throttle.PerSecond(4)}
	conc := throttle.Limit{Name: "conc", Algorithm: throttle.Concurrency, Max: 100, Lease: time.Minute}
	set, err := Compile("sms", "", smsFields, []Rule{
		{Limit: sender, Key: "sms:sender:{sender}", CostField: "segments"},
		{Limit: wide, Key: "sms:wide:{sender}", CostField: "segments"},
		{Limit: window, Key: "sms:window:{sender}", CostField: "segments"},
		{Limit: conc, Key: "sms:account:{account_sid}", Cost: 1},
	})
	require.NoError(t, err)
	burst := func(l throttle.Limit, b int64) throttle.Limit { l.Burst = b; return l }
	for _, tc := range []struct {
		segments string
		want     []throttle.Request
	}{
		{"1", []throttle.Request{
			{Key: "sms:sender:+1", Limit: sender, Cost: 1}, {Key: "sms:wide:+1", Limit: wide, Cost: 1},
			{Key: "sms:window:+1", Limit: window, Cost: 1}, {Key: "sms:account:AC1", Limit: conc, Cost: 1}}},
		// Over a GCRA limit's burst: admitted only when the limit is idle
		// (Burst = cost for this request); a window is cut to its capacity.
		{"3", []throttle.Request{
			{Key: "sms:sender:+1", Limit: burst(sender, 3), Cost: 3}, {Key: "sms:wide:+1", Limit: wide, Cost: 3},
			{Key: "sms:window:+1", Limit: window, Cost: 3}, {Key: "sms:account:AC1", Limit: conc, Cost: 1}}},
		{"11", []throttle.Request{
			{Key: "sms:sender:+1", Limit: burst(sender, 11), Cost: 11}, {Key: "sms:wide:+1", Limit: burst(wide, 11), Cost: 11},
			{Key: "sms:window:+1", Limit: window, Cost: 4}, {Key: "sms:account:AC1", Limit: conc, Cost: 1}}},
		// Not a whole number >= 1: costs 1. A huge one is bounded.
		{"", []throttle.Request{
			{Key: "sms:sender:+1", Limit: sender, Cost: 1}, {Key: "sms:wide:+1", Limit: wide, Cost: 1},
			{Key: "sms:window:+1", Limit: window, Cost: 1}, {Key: "sms:account:AC1", Limit: conc, Cost: 1}}},
		{"-2", []throttle.Request{
			{Key: "sms:sender:+1", Limit: sender, Cost: 1}, {Key: "sms:wide:+1", Limit: wide, Cost: 1},
			{Key: "sms:window:+1", Limit: window, Cost: 1}, {Key: "sms:account:AC1", Limit: conc, Cost: 1}}},
		{"99999999999", []throttle.Request{
			{Key: "sms:sender:+1", Limit: burst(sender, maxFieldCost), Cost: maxFieldCost}, {Key: "sms:wide:+1", Limit: burst(wide, maxFieldCost), Cost: maxFieldCost},
			{Key: "sms:window:+1", Limit: window, Cost: 4}, {Key: "sms:account:AC1", Limit: conc, Cost: 1}}},
	} {
		got := set.Requests(map[string]string{"sender": "+1", "account_sid": "AC1", "segments": tc.segments})
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("segments %q: Requests (-want +got):\n%s", tc.segments, diff)
		}
	}
}

func TestCostFieldCheck(t *testing.T) {
	t.Parallel()
	g := throttle.Limit{Name: "g", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(1)}
	dist := throttle.Limit{Name: "d", Algorithm: throttle.Distinct, Rate: throttle.PerDay(10)}
	require.NoError(t, Rule{Limit: g, Key: "sms:s:{sender}", CostField: "segments"}.Check("sms", smsFields))
	err := Rule{Limit: g, Key: "sms:s:{sender}", CostField: "pages"}.Check("sms", smsFields)
	require.ErrorContains(t, err, `limit "g": cost "pages" is not a field of sms tasks`)
	require.Equal(t, FieldCost, err.(*FieldError).Field)
	err = Rule{Limit: dist, Key: "sms:d:{sender}", Member: "{to}", CostField: "segments"}.Check("sms", smsFields)
	require.ErrorContains(t, err, "a distinct limit counts a new member 1")
	require.Equal(t, "1/s burst 1 per segment", Rule{Limit: g, CostField: "segments"}.Describe())
}

// TestSegmentCostPaces: with the limiter's reservations, a message of 3
// segments on a 1/s sender (Twilio's US long code MPS, in segments) goes
// at once when the sender is idle and the next message's slot is 3 s
// later; a cost of 2 on 1/s burst 3 spaces the sends 2 s apart once the
// burst is spent. Explicit times on the limiter's clock.
func TestSegmentCostPaces(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	now := t0
	l := throttle.NewRedis(srv.Client(t), throttle.Options{Prefix: "rc", Clock: func() time.Time { return now }})
	ctx := context.Background()
	reserve := func(set *Set, segments string, prio throttle.Priority) throttle.Reservation {
		t.Helper()
		r, err := l.Reserve(ctx, throttle.ReserveOptions{Priority: prio}, set.Requests(map[string]string{"sender": "+12025550100", "segments": segments})...)
		require.NoError(t, err)
		return r
	}

	one := throttle.Limit{Name: "sender", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(1), Burst: 1}
	set, err := Compile("sms", "", smsFields, []Rule{{Limit: one, Key: "sms:sender:{sender}", CostField: "segments"}})
	require.NoError(t, err)
	for _, step := range []struct {
		segments string
		firm     bool
		at       time.Duration // after t0
	}{
		{"3", true, 0},                // idle: the whole message goes now
		{"1", false, 3 * time.Second}, // its 3 segments are paced out first
	} {
		r := reserve(set, step.segments, throttle.Bulk)
		require.Equal(t, step.firm, r.Firm, "segments %s: %+v", step.segments, r)
		require.True(t, t0.Add(step.at).Equal(r.At), "segments %s: at %v, want t0+%v", step.segments, r.At, step.at)
	}

	three := throttle.Limit{Name: "sender", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(1), Burst: 3}
	set, err = Compile("sms", "", smsFields, []Rule{{Limit: three, Key: "sms:other:{sender}", CostField: "segments"}})
	require.NoError(t, err)
	for _, step := range []struct {
		firm bool
		at   time.Duration
	}{
		{true, 0},                // 2 of the burst of 3
		{true, time.Second},      // 1 left, 1 more comes back after 1 s
		{false, 3 * time.Second}, // then every 2 s (beyond the 2 s hold: planned)
	} {
		r := reserve(set, "2", throttle.High) // firm within the hold, so each takes its slot
		require.Equal(t, step.firm, r.Firm, "%+v", r)
		require.True(t, t0.Add(step.at).Equal(r.At), "at %v, want t0+%v", r.At, step.at)
	}
}

// TestSegmentCostPlans: the enqueue-time plan spaces a sender's sends by
// their segments too (3, 1, 2 segments on 1/s burst 1: at 0, 3 s, 4 s), and
// the first comes back firm for its slot.
func TestSegmentCostPlans(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	now := t0
	l := throttle.NewRedis(srv.Client(t), throttle.Options{Prefix: "rp", Clock: func() time.Time { return now }})
	one := throttle.Limit{Name: "sender", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(1), Burst: 1}
	set, err := Compile("sms", "", smsFields, []Rule{{Limit: one, Key: "sms:sender:{sender}", CostField: "segments"}})
	require.NoError(t, err)
	var sends []throttle.Send
	for i, seg := range []string{"3", "1", "2"} {
		sends = append(sends, throttle.Send{TaskID: string(rune('a' + i)),
			Requests: set.Requests(map[string]string{"sender": "+12025550100", "segments": seg})})
	}
	plans, err := l.Plan(context.Background(), throttle.ReserveOptions{}, sends)
	require.NoError(t, err)
	for i, want := range []time.Duration{0, 3 * time.Second, 4 * time.Second} {
		require.True(t, t0.Add(want).Equal(plans[i].At), "send %d planned at %v, want t0+%v", i, plans[i].At, want)
	}
	r, err := l.Reserve(context.Background(), throttle.ReserveOptions{TaskID: "a"}, sends[0].Requests...)
	require.NoError(t, err)
	require.True(t, r.Firm, "%+v", r)
}

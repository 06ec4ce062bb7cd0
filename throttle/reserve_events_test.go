package throttle_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/throttle"
)

// exceeded returns the limits.exceeded events in l's stream.
func exceeded(t *testing.T, l *throttle.Redis) []throttle.Event {
	t.Helper()
	evs, _, err := l.Events(context.Background(), "0", 1000, 0)
	require.NoError(t, err)
	var out []throttle.Event
	for _, e := range evs {
		if e.Type == throttle.EventExceeded {
			out = append(out, e)
		}
	}
	return out
}

// A daily cap that blocks reservations writes one limits.exceeded naming
// it, however many sends it blocks that day.
func TestReserveBlockedByADailyCapWritesOneExceededEvent(t *testing.T) {
	l, clock := reserveLimiter(t)
	ctx := context.Background()
	reqs := []throttle.Request{
		{Key: "wa:pair:1:+12025550101", Limit: pair6},
		{Key: "wa:daily:+12025550101", Limit: daily},
	}
	for i := range 5 {
		r, err := l.Reserve(ctx, throttle.ReserveOptions{TaskID: fmt.Sprint("t", i)}, reqs...)
		require.NoError(t, err)
		require.Equal(t, i < 2, r.Firm, "send %d: the daily cap is 2", i)
		clock.Advance(7 * time.Second) // past the pair's interval
	}
	evs := exceeded(t, l)
	require.Len(t, evs, 1, "three sends blocked by one key's daily cap: one event")
	e := evs[0]
	require.Equal(t, []any{"wa:daily:+12025550101", "daily", int64(2), 24 * time.Hour},
		[]any{e.Key, e.Name, e.Limit, e.Window})
}

// A backlog planned behind a paced limit writes one limits.exceeded per key
// per ExceededEvery, not one per send; sends planned within the hold (they
// go within it) write none.
func TestReserveBacklogWritesExceededOncePerSpan(t *testing.T) {
	l, clock := reserveLimiter(t)
	ctx := context.Background()
	perSec := throttle.Limit{Name: "sender", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(1), Burst: 1}
	req := throttle.Request{Key: "sms:sender:+12025550100", Limit: perSec}
	for i := range 3 { // one now, two within the 2s hold
		r, err := l.Reserve(ctx, throttle.ReserveOptions{TaskID: fmt.Sprint("h", i)}, req)
		require.NoError(t, err)
		require.LessOrEqual(t, r.Delay(), throttle.DefaultHold, "send %d", i)
	}
	require.Empty(t, exceeded(t, l), "sends within the hold are not blocked")

	planned := 0
	for i := range 150 { // planned over 150s: past ExceededEvery
		r, err := l.Reserve(ctx, throttle.ReserveOptions{TaskID: fmt.Sprint("t", i)}, req)
		require.NoError(t, err)
		if r.Planned && r.Delay() > throttle.DefaultHold {
			planned++
		}
	}
	require.Greater(t, planned, 140)
	evs := exceeded(t, l)
	require.Len(t, evs, 1, "%d sends planned behind one key: one event", planned)
	require.Equal(t, []any{"sms:sender:+12025550100", "sender"}, []any{evs[0].Key, evs[0].Name})

	clock.Advance(throttle.ExceededEvery)
	r, err := l.Reserve(ctx, throttle.ReserveOptions{TaskID: "late"}, req)
	require.NoError(t, err)
	require.False(t, r.Firm, "the backlog is still ahead")
	require.Len(t, exceeded(t, l), 2, "a minute later the backlog writes again")
}

// Emit writes only the types in EventTypes, the table `sluice events tail
// --type` accepts: each listed type is written, any other is dropped.
func TestEmitWritesOnlyListedEventTypes(t *testing.T) {
	l, _ := reserveLimiter(t)
	ctx := context.Background()
	l.Emit(ctx, "limits.exceded", "wa:daily:+12025550101", time.Millisecond)
	for _, typ := range throttle.EventTypes {
		l.Emit(ctx, typ, "wa:x:"+typ, time.Millisecond)
	}
	evs, _, err := l.Events(ctx, "0", 100, 0)
	require.NoError(t, err)
	var got []string
	for _, e := range evs {
		got = append(got, e.Type)
	}
	require.Equal(t, throttle.EventTypes, got)
}

// A campaign planned at enqueue behind a paced limit writes one
// limits.exceeded for the key its sends share (the sender's, not a
// recipient's pair key), with no reset; a plan that fits within the hold
// writes none.
func TestPlanBacklogWritesOneExceededEvent(t *testing.T) {
	l, _ := reserveLimiter(t)
	ctx := context.Background()
	sender := throttle.Limit{Name: "sender", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(1), Burst: 1}
	send := func(id string, i int) throttle.Send {
		return throttle.Send{TaskID: id, Requests: []throttle.Request{
			{Key: "wa:sender:106540352242922", Limit: sender},
			{Key: fmt.Sprintf("wa:pair:106540352242922:+120255501%02d", i), Limit: pair6},
		}}
	}
	_, err := l.Plan(ctx, throttle.ReserveOptions{}, []throttle.Send{send("a", 0), send("b", 1)})
	require.NoError(t, err)
	require.Empty(t, exceeded(t, l), "two sends at 1/s go within the hold")

	var sends []throttle.Send
	for i := range 40 {
		sends = append(sends, send(fmt.Sprint("t", i), i))
	}
	planned, err := l.Plan(ctx, throttle.ReserveOptions{}, sends)
	require.NoError(t, err)
	require.Greater(t, planned[len(planned)-1].At.Sub(planned[0].At), throttle.DefaultHold)
	evs := exceeded(t, l)
	require.Len(t, evs, 1, "40 sends planned behind one sender: one event")
	require.Equal(t, []any{"wa:sender:106540352242922", "sender", int64(1)}, []any{evs[0].Key, evs[0].Name, evs[0].Limit})
	require.True(t, evs[0].Reset.IsZero(), "no reset: a batch's last planned send is not the campaign's")

	_, err = l.Plan(ctx, throttle.ReserveOptions{}, []throttle.Send{send("u", 50)})
	require.NoError(t, err)
	require.Len(t, exceeded(t, l), 1, "once per key per minute")
}

package delivery

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/worker"
)

// One script call may carry the same send twice (the worker wrote it again
// after a timeout while the first write waited): it is counted once. A send
// that fails later in the call, or later in its own record, leaves every
// key written before with its TTL, and every send of the call gets the
// error.
func TestOneCallCarriesSeveralSends(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	s, err := New(Options{Redis: rdb, Prefix: "one"})
	require.NoError(t, err)
	ctx := context.Background()
	at := time.Date(2026, 11, 27, 15, 0, 0, 0, time.UTC)
	call := func(task, provider string) *sentCall {
		c, err := s.sentCallOf(Sent{TaskID: task, Queue: "whatsapp", Channel: "whatsapp", Tenant: "acme", Campaign: "c",
			ProviderID: provider, Status: "sent", At: at})
		require.NoError(t, err)
		return c
	}
	calls := []*sentCall{call("t1", "wamid.1"), call("t1", "wamid.1"), call("t2", "")}
	s.sent.exec(calls)
	for _, c := range calls {
		require.NoError(t, <-c.done)
	}
	p, err := s.Progress(ctx, "acme", "c")
	require.NoError(t, err)
	require.Equal(t, Progress{Sent: 2}, p, "t1 twice in one call, counted once")

	// t4's record key holds a list: the call fails at t4, after t3 made a
	// campaign's counters.
	require.NoError(t, rdb.RPush(ctx, RecordKey("one", "t4"), "x").Err())
	c3, err := s.sentCallOf(Sent{TaskID: "t3", Queue: "whatsapp", Channel: "whatsapp", Tenant: "acme", Campaign: "d", Status: "sent", At: at})
	require.NoError(t, err)
	c4, err := s.sentCallOf(Sent{TaskID: "t4", Queue: "whatsapp", Channel: "whatsapp", Tenant: "acme", Campaign: "d", Status: "sent", At: at})
	require.NoError(t, err)
	s.sent.exec([]*sentCall{c3, c4})
	require.ErrorContains(t, <-c3.done, "WRONGTYPE", "every send of the call gets the error")
	require.ErrorContains(t, <-c4.done, "WRONGTYPE")
	ttl, err := rdb.PTTL(ctx, CountersKey("one", Group("acme", "d"))).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, time.Duration(0), "the counters t3 wrote expire")

	// t5 fails within its own record, at its provider id's index (a list),
	// after it wrote its record and a new campaign's counters: both expire.
	require.NoError(t, rdb.RPush(ctx, IndexKey("one", "whatsapp", "wamid.5"), "x").Err())
	c5, err := s.sentCallOf(Sent{TaskID: "t5", Queue: "whatsapp", Channel: "whatsapp", Tenant: "acme", Campaign: "e",
		ProviderID: "wamid.5", Status: "sent", At: at})
	require.NoError(t, err)
	s.sent.exec([]*sentCall{c5})
	require.ErrorContains(t, <-c5.done, "WRONGTYPE")
	for _, k := range []string{CountersKey("one", Group("acme", "e")), RecordKey("one", "t5")} {
		ttl, err := rdb.PTTL(ctx, k).Result()
		require.NoError(t, err)
		require.Greater(t, ttl, time.Duration(0), "%s expires", k)
	}
}

// A campaign's counters are extended by the first record of a batcher, then
// left alone for countersEvery, then extended again; within that time a
// record that makes them anew (they expired, or were deleted) extends them
// all the same, and so does a waiting status applied to them.
func TestCountersAreExtendedOnceInAWhile(t *testing.T) {
	t.Parallel()
	s, rdb, now, record := clockedStore(t, "ext", time.Hour)
	ctx := context.Background()
	every := countersEvery(time.Hour)
	require.Equal(t, 3600*time.Millisecond, every)
	counters := CountersKey("ext", Group("acme", "c"))
	ttl := func() time.Duration {
		t.Helper()
		d, err := rdb.PTTL(ctx, counters).Result()
		require.NoError(t, err)
		return d
	}
	lower := func() { // as if the TTL had run down
		t.Helper()
		require.NoError(t, rdb.PExpire(ctx, counters, time.Minute).Err())
	}

	record("t1", "wamid.1")
	require.Greater(t, ttl(), 59*time.Minute, "the first record extends the counters")
	lower()
	*now = (*now).Add(every / 2)
	record("t2", "wamid.2")
	require.LessOrEqual(t, ttl(), time.Minute, "within countersEvery the TTL is left alone")
	*now = (*now).Add(every)
	record("t3", "wamid.3")
	require.Greater(t, ttl(), 59*time.Minute, "after countersEvery the record extends them again")

	// Made anew within countersEvery: extended.
	require.NoError(t, rdb.Del(ctx, counters).Err())
	*now = (*now).Add(every / 2)
	record("t4", "wamid.4")
	require.Greater(t, ttl(), 59*time.Minute, "counters the record made are extended")

	// A status that waited for its record: applied, and the counters
	// extended, within countersEvery.
	lower()
	applied, err := s.Update(ctx, "whatsapp", "wamid.5", Status{State: StateDelivered, At: *now})
	require.NoError(t, err)
	require.False(t, applied.Found)
	record("t5", "wamid.5")
	require.Greater(t, ttl(), 59*time.Minute, "a waiting status applied extends the counters")
	p, err := s.Progress(ctx, "acme", "c")
	require.NoError(t, err)
	require.Equal(t, Progress{Sent: 2, Delivered: 1}, p, "t4 and t5 since the counters were made anew")

	// A failed call leaves them to be extended by the next.
	require.NoError(t, rdb.Del(ctx, counters).Err())
	require.NoError(t, rdb.RPush(ctx, RecordKey("ext", "t6"), "x").Err())
	*now = (*now).Add(every)
	c6, err := s.sentCallOf(Sent{TaskID: "t6", Queue: "whatsapp", Channel: "whatsapp", Tenant: "acme", Campaign: "c", Status: "sent", At: *now})
	require.NoError(t, err)
	s.sent.exec([]*sentCall{c6})
	require.ErrorContains(t, <-c6.done, "WRONGTYPE")
	require.NoError(t, rdb.HSet(ctx, counters, "sent", 3).Err())
	lower()
	record("t7", "wamid.7")
	require.Greater(t, ttl(), 59*time.Minute, "the failed call's extension did not count")
}

// A campaign's counters outlive every record written between two of their
// extensions, so a callback for such a record never counts into counters
// that expired before it; and a callback that counts into counters with no
// TTL (a store of another TTL, an older version) gives them one.
func TestCountersOutliveTheirRecords(t *testing.T) {
	t.Parallel()
	s, rdb, now, record := clockedStore(t, "out", time.Minute)
	ctx := context.Background()
	counters := CountersKey("out", Group("acme", "c"))
	record("t1", "wamid.1")
	// The extension gives them the TTL and countersEvery (60ms here): a
	// record written up to countersEvery later, without extending them,
	// gets the TTL from then, and they still outlive it.
	c, err := rdb.PTTL(ctx, counters).Result()
	require.NoError(t, err)
	require.Greater(t, c, time.Minute+countersEvery(time.Minute)-20*time.Millisecond, "counters' TTL %v, want the TTL and countersEvery", c)
	*now = (*now).Add(countersEvery(time.Minute) / 2)
	record("t2", "wamid.2")
	c2, err := rdb.PTTL(ctx, counters).Result()
	require.NoError(t, err)
	require.LessOrEqual(t, c2, c, "t2, within countersEvery, left the counters' TTL alone")
	r, err := rdb.PTTL(ctx, RecordKey("out", "t2")).Result()
	require.NoError(t, err)
	require.Greater(t, c2, r, "the counters (%v) outlive the record written after their extension (%v)", c2, r)

	require.NoError(t, rdb.Persist(ctx, counters).Err())
	a, err := s.Update(ctx, "whatsapp", "wamid.2", Status{State: StateDelivered, At: *now})
	require.NoError(t, err)
	require.True(t, a.Moved)
	c, err = rdb.PTTL(ctx, counters).Result()
	require.NoError(t, err)
	require.Greater(t, c, time.Duration(0), "a callback that counted into counters with no TTL gives them one")
}

// clockedStore returns a store of its own (prefix, TTL) on a redis-server
// of the test's own, whose batcher reads the time from *now, and record,
// which records one WhatsApp send of tenant acme's campaign c at *now
// through the batcher, alone in its script call, and fails the test on an
// error.
func clockedStore(t *testing.T, prefix string, ttl time.Duration) (*Store, *redis.Client, *time.Time, func(task, provider string)) {
	t.Helper()
	rdb := redistest.Start(t).Client(t)
	s, err := New(Options{Redis: rdb, Prefix: prefix, TTL: ttl})
	require.NoError(t, err)
	now := time.Date(2026, 11, 28, 19, 0, 0, 0, time.UTC)
	s.sent.now = func() time.Time { return now }
	record := func(task, provider string) {
		t.Helper()
		c, err := s.sentCallOf(Sent{TaskID: task, Queue: "whatsapp", Channel: "whatsapp", Tenant: "acme", Campaign: "c",
			ProviderID: provider, Status: "sent", At: now})
		require.NoError(t, err)
		s.sent.exec([]*sentCall{c})
		require.NoError(t, <-c.done)
	}
	return s, rdb, &now, record
}

// A send the worker kept through a Redis outage (worker.KeptRecord) is due
// at once, so that a store busy with new sends does not hold each of them
// its linger; any other send may wait for company.
func TestKeptSendsAreDueAtOnce(t *testing.T) {
	t.Parallel()
	s, err := New(Options{Redis: redistest.Start(t).Client(t), Prefix: "kept"})
	require.NoError(t, err)
	r := Sent{TaskID: "t1", Queue: "whatsapp", Channel: "whatsapp", Tenant: "acme", Campaign: "c", Status: "sent",
		At: time.Date(2026, 11, 29, 4, 0, 0, 0, time.UTC)}
	c, err := s.sentCallFor(context.Background(), r)
	require.NoError(t, err)
	require.Equal(t, lingerFreely, c.due, "a new send may wait the linger")
	c, err = s.sentCallFor(worker.WithKeptRecord(context.Background()), r)
	require.NoError(t, err)
	require.True(t, c.due.IsZero(), "a kept send is due at once")
	_, err = s.sentCallFor(worker.WithKeptRecord(context.Background()), Sent{TaskID: "t2", Status: "delivered"})
	require.ErrorIs(t, err, worker.ErrInvalidRecord, "a bad send is refused as before")
}

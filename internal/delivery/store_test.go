package delivery_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/internal/delivery"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/worker"
)

var (
	prefixN atomic.Int64
	t0      = time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
)

// newStore returns a store on a redis-server of the test's own, with a
// prefix of its own, and a client of that server.
func newStore(t *testing.T) (*delivery.Store, string, *redis.Client) {
	t.Helper()
	rdb := redistest.Start(t).Client(t)
	prefix := fmt.Sprintf("dt%d", prefixN.Add(1))
	s, err := delivery.New(delivery.Options{Redis: rdb, Prefix: prefix})
	require.NoError(t, err)
	return s, prefix, rdb
}

func sent(task, provider string, at time.Duration) delivery.Sent {
	return delivery.Sent{TaskID: task, Queue: "sms", Channel: "sms", Tenant: "acme", Campaign: "spring-sale", ProviderID: provider, Status: "sent", At: t0.Add(at)}
}

func TestStatusesNeverGoBack(t *testing.T) {
	t.Parallel()
	type step struct {
		state     delivery.State
		code      int
		wantState delivery.State
		want      delivery.Progress
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"in order", []step{
			{delivery.StateSent, 0, delivery.StateSent, delivery.Progress{Sent: 1}},
			{delivery.StateDelivered, 0, delivery.StateDelivered, delivery.Progress{Sent: 1, Delivered: 1}},
			{delivery.StateRead, 0, delivery.StateRead, delivery.Progress{Sent: 1, Delivered: 1, Read: 1}},
		}},
		{"late sent and delivered after read", []step{
			{delivery.StateRead, 0, delivery.StateRead, delivery.Progress{Sent: 1, Delivered: 1, Read: 1}},
			{delivery.StateSent, 0, delivery.StateRead, delivery.Progress{Sent: 1, Delivered: 1, Read: 1}},
			{delivery.StateDelivered, 0, delivery.StateRead, delivery.Progress{Sent: 1, Delivered: 1, Read: 1}},
			{delivery.StateQueued, 0, delivery.StateRead, delivery.Progress{Sent: 1, Delivered: 1, Read: 1}},
		}},
		{"undelivered is final", []step{
			{delivery.StateUndelivered, 30003, delivery.StateUndelivered, delivery.Progress{Sent: 1, Undelivered: 1}},
			{delivery.StateDelivered, 0, delivery.StateUndelivered, delivery.Progress{Sent: 1, Undelivered: 1}},
			{delivery.StateFailed, 30008, delivery.StateUndelivered, delivery.Progress{Sent: 1, Undelivered: 1}},
		}},
		{"a duplicate counts once", []step{
			{delivery.StateDelivered, 0, delivery.StateDelivered, delivery.Progress{Sent: 1, Delivered: 1}},
			{delivery.StateDelivered, 0, delivery.StateDelivered, delivery.Progress{Sent: 1, Delivered: 1}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, _, _ := newStore(t)
			ctx := context.Background()
			require.NoError(t, s.RecordSent(ctx, sent("task-1", "SM1", 0)))
			for i, st := range tc.steps {
				u, err := s.Update(ctx, "sms", "SM1", delivery.Status{State: st.state, Code: st.code, At: t0.Add(time.Duration(i+1) * time.Second)})
				id, found := u.TaskID, u.Found
				require.NoError(t, err)
				require.True(t, found)
				require.Equal(t, "task-1", id)
				got, err := s.Get(ctx, "task-1")
				require.NoError(t, err)
				require.Equal(t, st.wantState, got.State, "step %d", i)
				p, err := s.Progress(ctx, "acme", "spring-sale")
				require.NoError(t, err)
				if diff := cmp.Diff(st.want, p); diff != "" {
					t.Fatalf("step %d: progress (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}

func TestRecordKeepsTheFailure(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t)
	ctx := context.Background()
	require.NoError(t, s.RecordSent(ctx, sent("task-1", "SM1", 0)))
	_, err := s.Update(ctx, "sms", "SM1", delivery.Status{State: delivery.StateUndelivered, Code: 30003, Reason: "Unreachable destination handset", At: t0.Add(5 * time.Second)})
	require.NoError(t, err)
	got, err := s.Get(ctx, "task-1")
	require.NoError(t, err)
	want := &delivery.Status{TaskID: "task-1", Queue: "sms", Channel: "sms", Tenant: "acme", Campaign: "spring-sale", ProviderID: "SM1",
		State: delivery.StateUndelivered, Code: 30003, Reason: "Unreachable destination handset", At: t0.Add(5 * time.Second), SentAt: t0}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
		t.Fatalf("record (-want +got):\n%s", diff)
	}
}

func TestStatusBeforeTheSendIsRecordedWaits(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t)
	ctx := context.Background()
	// The provider's callback comes before the worker records the send.
	u, err := s.Update(ctx, "whatsapp", "wamid.X1", delivery.Status{State: delivery.StateDelivered, At: t0.Add(time.Second)})
	id, found := u.TaskID, u.Found
	require.NoError(t, err)
	require.False(t, found)
	require.Empty(t, id)
	u, err = s.Update(ctx, "whatsapp", "wamid.X1", delivery.Status{State: delivery.StateSent, At: t0.Add(time.Second)})
	require.NoError(t, err)
	_, err = s.Get(ctx, "task-w")
	require.ErrorIs(t, err, delivery.ErrNotFound)

	r := delivery.Sent{TaskID: "task-w", Queue: "whatsapp", Channel: "whatsapp", Tenant: "acme", Campaign: "t", ProviderID: "wamid.X1", Status: "sent", At: t0}
	require.NoError(t, s.RecordSent(ctx, r))
	got, err := s.Get(ctx, "task-w")
	require.NoError(t, err)
	require.Equal(t, delivery.StateDelivered, got.State, "the waiting status applies")
	p, err := s.Progress(ctx, "acme", "t")
	require.NoError(t, err)
	require.Equal(t, delivery.Progress{Sent: 1, Delivered: 1}, p)

	// Now the index names the task.
	u, err = s.Update(ctx, "whatsapp", "wamid.X1", delivery.Status{State: delivery.StateRead})
	id, found = u.TaskID, u.Found
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "task-w", id)
	// The same id on another channel is another message.
	u, err = s.Update(ctx, "sms", "wamid.X1", delivery.Status{State: delivery.StateRead})
	found = u.Found
	require.NoError(t, err)
	require.False(t, found)
}

func TestArchivedTasks(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t)
	ctx := context.Background()
	f := delivery.Failed{TaskID: "task-a", Queue: "sms", Channel: "sms", Tenant: "acme", Campaign: "spring-sale", Code: 21211, Reason: "twilio: permanent: code 21211\n(invalid To number)", At: t0}
	require.NoError(t, s.RecordFailed(ctx, f))
	require.NoError(t, s.RecordFailed(ctx, f), "recorded twice, counted once")
	got, err := s.Get(ctx, "task-a")
	require.NoError(t, err)
	require.Equal(t, delivery.StateArchived, got.State)
	require.Equal(t, 21211, got.Code)
	require.Equal(t, "twilio: permanent: code 21211 (invalid To number)", got.Reason, "control characters are not stored")
	require.True(t, got.SentAt.IsZero())
	p, err := s.Progress(ctx, "acme", "spring-sale")
	require.NoError(t, err)
	require.Equal(t, delivery.Progress{Failed: 1}, p)

	// Re-run from the archive and sent: no longer failed.
	require.NoError(t, s.RecordSent(ctx, sent("task-a", "SM9", time.Minute)))
	p, err = s.Progress(ctx, "acme", "spring-sale")
	require.NoError(t, err)
	require.Equal(t, delivery.Progress{Sent: 1}, p)

	// A record of an accepted send is never turned into an archive.
	require.NoError(t, s.RecordFailed(ctx, f))
	got, err = s.Get(ctx, "task-a")
	require.NoError(t, err)
	require.Equal(t, delivery.StateSent, got.State)
	require.Equal(t, "SM9", got.ProviderID)
}

func TestRecordSentTwiceCountsOnce(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t)
	ctx := context.Background()
	r := sent("task-1", "", 0)
	r.Status = "sent_unconfirmed"
	require.NoError(t, s.RecordSent(ctx, r))
	require.NoError(t, s.RecordSent(ctx, r))
	p, err := s.Progress(ctx, "acme", "spring-sale")
	require.NoError(t, err)
	require.Equal(t, delivery.Progress{Sent: 1}, p)
	got, err := s.Get(ctx, "task-1")
	require.NoError(t, err)
	require.Equal(t, delivery.StateSentUnconfirmed, got.State)
}

// TestSentAtIsTheAcceptedSend: SentAt is when the provider accepted the
// task's send (worker.SentLookup), zero for a task never sent, archived,
// or whose record a status callback moved on.
func TestSentAtIsTheAcceptedSend(t *testing.T) {
	t.Parallel()
	s, _, rdb := newStore(t)
	ctx := context.Background()
	at, err := s.SentAt(ctx, "task-1", "sms")
	require.NoError(t, err)
	require.True(t, at.IsZero(), "never sent")

	require.NoError(t, s.RecordFailed(ctx, delivery.Failed{TaskID: "task-1", Queue: "sms", Channel: "sms", Tenant: "acme", Campaign: "spring-sale", Reason: "x", At: t0}))
	at, err = s.SentAt(ctx, "task-1", "sms")
	require.NoError(t, err)
	require.True(t, at.IsZero(), "archived, never accepted")

	require.NoError(t, s.RecordSent(ctx, sent("task-1", "SM1", time.Minute)))
	_, err = s.Update(ctx, "sms", "SM1", delivery.Status{State: delivery.StateDelivered, At: t0.Add(time.Hour)})
	require.NoError(t, err)
	require.NoError(t, s.RecordSent(ctx, sent("task-1", "SM1", time.Minute)), "written again by the worker after an outage")
	at, err = s.SentAt(ctx, "task-1", "sms")
	require.NoError(t, err)
	require.True(t, at.Equal(t0.Add(time.Minute)), "got %v", at)
	at, err = s.SentAt(ctx, "task-1", "whatsapp")
	require.NoError(t, err)
	require.True(t, at.IsZero(), "a task with the same ID in another queue was not sent")
	p, err := s.Progress(ctx, "acme", "spring-sale")
	require.NoError(t, err)
	require.Equal(t, delivery.Progress{Sent: 1, Delivered: 1}, p, "a send written twice counts once, and keeps its delivery")

	require.NoError(t, rdb.Close())
	_, err = s.SentAt(ctx, "task-1", "sms")
	require.Error(t, err, "Redis' error")
}

func TestEveryKeyHasATTL(t *testing.T) {
	t.Parallel()
	s, prefix, rdb := newStore(t)
	ctx := context.Background()
	require.NoError(t, s.RecordSent(ctx, sent("task-1", "SM1", 0)))
	require.NoError(t, s.RecordFailed(ctx, delivery.Failed{TaskID: "task-2", Queue: "sms", Channel: "sms", Reason: "x"}))
	_, err := s.Update(ctx, "sms", "SM-unknown", delivery.Status{State: delivery.StateSent})
	require.NoError(t, err)
	keys, err := rdb.Keys(ctx, prefix+":*").Result()
	require.NoError(t, err)
	require.ElementsMatch(t, []string{
		delivery.RecordKey(prefix, "task-1"), delivery.RecordKey(prefix, "task-2"),
		delivery.IndexKey(prefix, "sms", "SM1"), delivery.IndexKey(prefix, "sms", "SM-unknown"),
		delivery.CountersKey(prefix, delivery.Group("acme", "spring-sale")), delivery.CountersKey(prefix, delivery.Group("", "")),
	}, keys)
	for _, k := range keys {
		ttl, err := rdb.PTTL(ctx, k).Result()
		require.NoError(t, err)
		require.Greater(t, ttl, time.Duration(0), k)
		if strings.Contains(k, "SM-unknown") {
			require.LessOrEqual(t, ttl, delivery.DefaultPendingTTL, "a status waiting for its send lives an hour")
		} else if strings.Contains(k, ":campaign:") {
			require.LessOrEqual(t, ttl, delivery.DefaultTTL+time.Minute, "counters outlive their records by a minute at most: %s", k)
			require.Greater(t, ttl, delivery.DefaultTTL, k)
		} else {
			require.LessOrEqual(t, ttl, delivery.DefaultTTL, k)
			require.Greater(t, ttl, delivery.DefaultTTL-time.Minute, k)
		}
	}
}

func TestHostileInputIsRefused(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t)
	ctx := context.Background()
	long := strings.Repeat("x", delivery.MaxIDBytes+1)
	for name, tc := range map[string]struct {
		channel, id string
		st          delivery.State
		want        string
	}{
		"empty id":        {"sms", "", delivery.StateSent, "provider id: required"},
		"long id":         {"sms", long, delivery.StateSent, "provider id: 257 bytes"},
		"id with space":   {"sms", "SM 1", delivery.StateSent, "provider id: want printable ASCII"},
		"id with newline": {"sms", "SM1\n", delivery.StateSent, "provider id: want printable ASCII"},
		"channel":         {"sms:x", "SM1", delivery.StateSent, "channel: want a-z"},
		"state":           {"sms", "SM1", "archived", `state "archived", want queued`},
		"unknown state":   {"sms", "SM1", "exploded", `state "exploded"`},
	} {
		_, err := s.Update(ctx, tc.channel, tc.id, delivery.Status{State: tc.st})
		require.ErrorContains(t, err, tc.want, name)
	}
	r := sent("task 1", "SM1", 0)
	err := s.RecordSent(ctx, r)
	require.ErrorContains(t, err, "task id: want printable ASCII")
	require.ErrorIs(t, err, worker.ErrInvalidRecord, "the worker does not keep it to write again")
	r = sent("task-1", "SM\n1", 0)
	require.ErrorIs(t, s.RecordSent(ctx, r), worker.ErrInvalidRecord)
	r = sent("task-1", "SM1", 0)
	r.Status = "delivered"
	err = s.RecordSent(ctx, r)
	require.ErrorContains(t, err, "want sent or sent_unconfirmed")
	require.ErrorIs(t, err, worker.ErrInvalidRecord)
	_, err = s.SentAt(ctx, long, "sms")
	require.ErrorContains(t, err, "task id")
	_, err = s.Get(ctx, long)
	require.ErrorContains(t, err, "task id")
	_, err = s.Progress(ctx, "acme", long)
	require.ErrorContains(t, err, "over 256 bytes")
	// A long reason is cut, on a rune boundary.
	require.NoError(t, s.RecordSent(ctx, sent("task-1", "SM1", 0)))
	_, err = s.Update(ctx, "sms", "SM1", delivery.Status{State: delivery.StateFailed, Reason: strings.Repeat("é", 400)})
	require.NoError(t, err)
	got, err := s.Get(ctx, "task-1")
	require.NoError(t, err)
	require.LessOrEqual(t, len(got.Reason), delivery.MaxReasonBytes)
	require.True(t, strings.HasSuffix(got.Reason, "é"))
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	_, err := delivery.New(delivery.Options{})
	require.ErrorContains(t, err, "Options.Redis is required")
	_, err = delivery.New(delivery.Options{Redis: redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), TTL: time.Millisecond})
	require.ErrorContains(t, err, "Options.TTL")
}

func TestCampaignCountersAreTheTenants(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t)
	ctx := context.Background()
	require.NoError(t, s.AddEnqueued(ctx, "acme", "spring-sale", 2))
	require.NoError(t, s.RecordSent(ctx, sent("task-1", "SM1", 0)))
	// Another tenant naming the same campaign moves only its own counters.
	other := sent("task-2", "SM2", 0)
	other.Tenant = "globex"
	require.NoError(t, s.RecordSent(ctx, other))
	require.NoError(t, s.AddEnqueued(ctx, "globex", "spring-sale", 5))
	p, err := s.Progress(ctx, "acme", "spring-sale")
	require.NoError(t, err)
	require.Equal(t, delivery.Progress{Enqueued: 2, Sent: 1}, p)
	p, err = s.Progress(ctx, "globex", "spring-sale")
	require.NoError(t, err)
	require.Equal(t, delivery.Progress{Enqueued: 5, Sent: 1}, p)
	// A name that would collide without the tenant's length does not.
	require.NotEqual(t, delivery.Group("a:b", "c"), delivery.Group("a", "b:c"))
}

func TestApplySaysWhetherTheRecordMovedAndWhenItWasSent(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t)
	ctx := context.Background()
	require.NoError(t, s.RecordSent(ctx, sent("task-1", "SM1", 0)))
	u, err := s.Update(ctx, "sms", "SM1", delivery.Status{State: delivery.StateUndelivered, Code: 30022, At: t0.Add(time.Second)})
	require.NoError(t, err)
	require.Equal(t, "task-1", u.TaskID)
	require.True(t, u.Found && u.Moved)
	require.True(t, u.SentAt.Equal(t0), "sent at %v, want %v", u.SentAt, t0)
	// The same status again (a provider's retry, a replay) moves nothing.
	u, err = s.Update(ctx, "sms", "SM1", delivery.Status{State: delivery.StateUndelivered, Code: 30022, At: t0.Add(time.Second)})
	require.NoError(t, err)
	require.True(t, u.Found)
	require.False(t, u.Moved)
	// A message the worker has not recorded: pending, not found; the first
	// report moves the waiting state, its repeat does not.
	u, err = s.Update(ctx, "sms", "SM-later", delivery.Status{State: delivery.StateSent})
	require.NoError(t, err)
	require.Equal(t, delivery.Applied{Moved: true}, u)
	u, err = s.Update(ctx, "sms", "SM-later", delivery.Status{State: delivery.StateSent})
	require.NoError(t, err)
	require.Equal(t, delivery.Applied{}, u)
}

// A record RecordSent just made reads back whole: the fields the script
// leaves out of a new record (code 0, no reason) read as their defaults.
// A re-run of an archived task, recorded sent, clears the archive's code
// and reason.
func TestGetOfANewRecordIsWhole(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t)
	ctx := context.Background()
	require.NoError(t, s.RecordSent(ctx, sent("task-n", "SMn", 2*time.Second)))
	got, err := s.Get(ctx, "task-n")
	require.NoError(t, err)
	want := &delivery.Status{TaskID: "task-n", Queue: "sms", Channel: "sms", Tenant: "acme", Campaign: "spring-sale", ProviderID: "SMn",
		State: delivery.StateSent, At: t0.Add(2 * time.Second), SentAt: t0.Add(2 * time.Second)}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
		t.Fatalf("Get (-want +got):\n%s", diff)
	}

	require.NoError(t, s.RecordFailed(ctx, delivery.Failed{TaskID: "task-r", Queue: "sms", Channel: "sms", Tenant: "acme",
		Campaign: "spring-sale", Code: 21211, Reason: "invalid To number", At: t0}))
	require.NoError(t, s.RecordSent(ctx, sent("task-r", "SMr", 3*time.Second)))
	got, err = s.Get(ctx, "task-r")
	require.NoError(t, err)
	want = &delivery.Status{TaskID: "task-r", Queue: "sms", Channel: "sms", Tenant: "acme", Campaign: "spring-sale", ProviderID: "SMr",
		State: delivery.StateSent, At: t0.Add(3 * time.Second), SentAt: t0.Add(3 * time.Second)}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
		t.Fatalf("Get after a re-run (-want +got):\n%s", diff)
	}
}

package producer_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/producer"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
	"github.com/sluice-dev/sluice/worker"
)

// With queue groups (Channel.QueueGroups, spread_by), the producer puts each
// send, or the batch task carrying it, in its sender's group
// (tasks.GroupQueue), and a worker left to its default queues serves every
// group: each send is delivered once, none is refused as being in another
// channel's queue, and the queues end empty but for completed tasks.
func TestQueueGroupsHoldEachSendersSendsAndWorkersServeThemAll(t *testing.T) {
	t.Parallel()
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch_sends=%t", batch), func(t *testing.T) {
			t.Parallel()
			const senders, each, groups = 5, 6, 4
			delivered := make(chan string, senders*each)
			prov := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_ = r.ParseForm()
				delivered <- r.PostForm.Get("From") + " " + r.PostForm.Get("To")
				w.WriteHeader(http.StatusCreated)
				_, _ = w.Write([]byte(`{"sid":"SM0123456789abcdef0123456789abcdef","status":"queued","num_segments":"1"}`))
			}))
			t.Cleanup(prov.Close)
			rdb := redistest.Start(t).Client(t)
			lim := throttle.NewRedis(rdb, throttle.Options{OverrideRefresh: -1})
			sender := rules.Rule{Limit: throttle.Limit{Name: "sender", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(20), Burst: 1}, Key: "sms:sender:{sender}"}
			ch := worker.SMSChannel(&channels.Twilio{BaseURL: prov.URL, AccountSID: "AC0123456789abcdef0123456789abcdef", AuthToken: "t0ken", HTTP: prov.Client()},
				[]rules.Rule{sender})
			ch.SpreadBy, ch.QueueGroups, ch.BatchSends = "sender", groups, batch
			prod, err := producer.New(producer.Options{Redis: rdb, Limiter: lim, Channels: []worker.Channel{ch}})
			require.NoError(t, err)

			var items []producer.Item
			used := map[string]bool{}
			for s := range senders {
				from := fmt.Sprintf("+1202555%04d", 100+s)
				used[tasks.GroupQueue("sms", groups, from)] = true
				for i := range each {
					items = append(items, producer.Item{Task: smsTask(t, tasks.SMSSend{From: from, To: fmt.Sprintf("+1202555%04d", 1000+s*each+i),
						IdempotencyKey: fmt.Sprintf("s%d-%d", s, i)})})
				}
			}
			require.Greater(t, len(used), 1, "the senders fall in more than one group")
			out, err := prod.Send(context.Background(), items)
			require.NoError(t, err)
			for i, r := range out {
				require.NoError(t, r.Err, i)
				p, err := tasks.DecodeSMSSend(items[i].Task.Payload())
				require.NoError(t, err)
				require.Equal(t, tasks.GroupQueue("sms", groups, p.From), r.Info.Queue, "send %d is in its sender's group", i)
			}

			// A repeat of a key from a sender of another group is refused,
			// as it is with one queue: the first's queue is looked up, so
			// that asynq refuses it there (its own task), or the claim does
			// (a batch carried it).
			first := "+12025550100"
			other := ""
			for s := range senders {
				if f := fmt.Sprintf("+1202555%04d", 100+s); tasks.GroupQueue("sms", groups, f) != tasks.GroupQueue("sms", groups, first) {
					other = f
					break
				}
			}
			require.NotEmpty(t, other)
			again, err := prod.Send(context.Background(), []producer.Item{{Task: smsTask(t, tasks.SMSSend{From: other, To: "+12025559999", IdempotencyKey: "s0-1"})}})
			require.NoError(t, err)
			require.ErrorIs(t, again[0].Err, tasks.ErrDuplicate, "a repeat from another group's sender")

			reg := prometheus.NewRegistry()
			w, err := worker.New(worker.Options{Redis: rdb, Limiter: lim, Channels: []worker.Channel{ch}, Metrics: worker.NewMetrics(reg),
				Concurrency: 50, ShutdownTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			require.NoError(t, w.Start())
			t.Cleanup(w.Shutdown)
			seen := map[string]int{}
			timeout := time.After(time.Minute) // a hang's bound, not a measure
			for range senders * each {
				select {
				case d := <-delivered:
					seen[d]++
				case <-timeout:
					t.Fatalf("delivered %d of %d", len(seen), senders*each)
				}
			}
			for d, n := range seen {
				require.Equal(t, 1, n, "%s delivered once", d)
			}
			require.Len(t, seen, senders*each)

			// Each queue, the plain one and the groups, ends with nothing left
			// to run and nothing archived.
			insp := asynq.NewInspectorFromRedisClient(rdb)
			have, err := insp.Queues()
			require.NoError(t, err)
			for _, q := range tasks.GroupQueues("sms", groups) {
				if !slices.Contains(have, q) { // (a queue that never held a task does not exist)
					require.False(t, used[q], "%s was used", q)
					continue
				}
				deadline := time.Now().Add(time.Minute) // the completions follow the sends
				for {
					qi, err := insp.GetQueueInfo(q)
					require.NoError(t, err, q)
					require.Zero(t, qi.Archived, q)
					if qi.Pending+qi.Active+qi.Scheduled+qi.Retry == 0 {
						require.True(t, used[q] || q == "sms", "%s holds tasks of no sender's group", q)
						break
					}
					require.True(t, time.Now().Before(deadline), "%s: %+v", q, qi)
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
}

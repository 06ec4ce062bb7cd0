package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/throttle"
	"github.com/sluice-dev/sluice/worker"
)

// A channel whose sends to one recipient are limited to one per 6 s: the
// first task is sent, the second comes back as a *ThrottledError that asynq
// (through worker.IsFailure and worker.RetryDelay) requeues for its wait
// without spending a retry. The wait is 6 s widened by the channel's
// headroom (throttle.DefaultHeadroom, 1.5%), the margin that keeps network
// jitter from bringing two sends closer than 6 s at the provider.
func ExampleWorker_Handler() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	lim := throttle.NewRedis(rdb, throttle.Options{Prefix: "example", Clock: func() time.Time { return now }})

	pair := throttle.Limit{Name: "pair", Algorithm: throttle.GCRA, Rate: throttle.Rate{Limit: 1, Period: 6 * time.Second}, Burst: 1}
	ch := worker.Channel{
		Name: "demo", TaskType: "demo:send",
		Rules: []rules.Rule{{Limit: pair, Key: "demo:pair:{to}"}},
		Prepare: func(payload []byte) (worker.Prepared, error) {
			to := string(payload)
			return worker.Prepared{
				Fields: map[string]string{"to": to},
				Send: func(context.Context) (channels.Response, error) {
					fmt.Println("sent to", to)
					return channels.Response{Status: 200}, nil
				},
			}, nil
		},
	}
	w, err := worker.New(worker.Options{Redis: rdb, Limiter: lim, Channels: []worker.Channel{ch}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	h, err := w.Handler(ch)
	if err != nil {
		panic(err)
	}
	for range 2 {
		err := h.ProcessTask(context.Background(), asynq.NewTask("demo:send", []byte("+12025550123")))
		var te *worker.ThrottledError
		if !errors.As(err, &te) {
			fmt.Println("error:", err)
			continue
		}
		// The wait is 6 s widened by the headroom and by the send latency
		// this host measured (a wall-clock figure, a millisecond or two
		// here), so it is shown against the floor it never goes under.
		floor := 6 * time.Second * 1015 / 1000
		fmt.Printf("blocked by %q on %s, retry after >= %v: %v, failure: %v\n",
			te.Limit, te.Key, floor, te.RetryAfter >= floor && te.Wait >= te.RetryAfter, worker.IsFailure(err))
	}
	// Output:
	// sent to +12025550123
	// error: <nil>
	// blocked by "pair" on demo:pair:+12025550123, retry after >= 6.09s: true, failure: false
}

package worker

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
)

// The next send of a sender is looked for in this send's queue, then the
// sender's group, then the channel's own queue, each once.
func TestNextQueuesCoverTheSendersGroupAndTheChannelsQueue(t *testing.T) {
	fields := map[string]string{"sender": "+12025550100"}
	group := tasks.GroupQueue("sms", 4, "+12025550100")
	h := &handler{ch: Channel{Queue: "sms", SpreadBy: "sender", QueueGroups: 4}}
	require.Equal(t, []string{group, "sms"}, h.nextQueues(group, fields), "from the group")
	require.Equal(t, []string{"sms", group}, h.nextQueues("sms", fields), "from the plain queue")
	require.Equal(t, []string{group, "sms"}, h.nextQueues("", fields), "queue unknown")
	h.ch.QueueGroups = 0
	require.Equal(t, []string{"sms"}, h.nextQueues("sms", fields), "no groups")
}

// A server given its queues must serve every queue group of its channels:
// one left out would hold its senders' sends for ever.
func TestNewRefusesQueuesWithoutTheGroups(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ch := SMSChannel(&channels.Twilio{}, nil)
	ch.SpreadBy, ch.QueueGroups = "sender", 2
	opts := Options{Redis: rdb, Limiter: throttle.NewRedis(rdb, throttle.Options{}), Channels: []Channel{ch},
		Queues: map[string]int{"sms": 1, "sms.g0": 1}, Logger: slog.New(slog.DiscardHandler)}
	_, err := New(opts)
	require.ErrorContains(t, err, `no weight for queue "sms.g1", a queue group of channel sms`)
	opts.Queues["sms.g1"] = 1
	w, err := New(opts)
	require.NoError(t, err)
	require.NotNil(t, w)
}

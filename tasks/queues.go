package tasks

import (
	"hash/fnv"
	"strconv"

	"github.com/hibiken/asynq"
)

// MaxQueueGroups is the most queue groups a channel may have
// (channels.<name>.queue_groups).
const MaxQueueGroups = 64

// GroupQueues returns the asynq queues of a channel whose queue is q and
// which has n queue groups: q itself, then "q.g0" … "q.g<n-1>". With n ≤ 1
// it is just q. asynq keeps each queue under one hash tag ("asynq:{q.g3}:…"),
// so on a Redis Cluster a channel's groups, and the enqueue, dequeue and
// completion of the sends in them, spread over the masters as their tags
// do. q is served too: it holds the tasks that plain asynq clients enqueue
// (NewWhatsAppSendTask and the like name q) and those queued before the
// groups were set.
func GroupQueues(q string, n int) []string {
	if n <= 1 {
		return []string{q}
	}
	out := make([]string, 0, 1+n)
	out = append(out, q)
	for k := range n {
		out = append(out, q+".g"+strconv.Itoa(k))
	}
	return out
}

// GroupQueue returns the queue, among GroupQueues(q, n), of a send whose
// spread value (its channel's spread_by field: the WhatsApp
// phone_number_id, the SMS sender) is v: "q.g<k>", k being FNV-1a of v
// modulo n, so that one sender's sends, and the batch tasks carrying them,
// always share a queue. With n ≤ 1 or v "" it is q.
func GroupQueue(q string, n int, v string) string {
	if n <= 1 || v == "" {
		return q
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(v))
	return q + ".g" + strconv.Itoa(int(h.Sum32()%uint32(n)))
}

// FindTask returns asynq's record of task id from the first of queues that
// holds it (a channel's queues: GroupQueues, the likeliest first). The
// error satisfies NoSuchTask when none does; another error is Redis's, from
// the queue that gave it, and stops the search.
func FindTask(insp *asynq.Inspector, queues []string, id string) (*asynq.TaskInfo, error) {
	err := error(asynq.ErrTaskNotFound)
	for _, q := range queues {
		var info *asynq.TaskInfo
		info, err = insp.GetTaskInfo(q, id)
		if err == nil {
			return info, nil
		}
		if !NoSuchTask(err) {
			return nil, err
		}
	}
	return nil, err
}

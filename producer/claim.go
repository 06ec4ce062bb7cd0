package producer

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-dev/sluice/control"
)

// ClaimTTL is how long a claim on an idempotency key lasts while its task
// is being enqueued: it only has to outlast one Enqueue call, so that two
// producers sending one key on two channels at once cannot both find it
// free. Once the task is enqueued the claim is kept for its life
// (Options.ClaimRetention).
const ClaimTTL = 10 * time.Minute

// DefaultClaimRetention is Options.ClaimRetention's default: 7 days past
// a task's planned slot. That outlasts a task's life in asynq with
// Sluice's defaults: its retries (worker.DefaultMaxRetryAfter and the
// provider retry's max_age, 24 h each) and a completed task's retention
// (tasks.DefaultRetention, 24 h). asynq keeps an archived task longer (up
// to 90 days); after the claim ends, its key may be used on another
// channel.
const DefaultClaimRetention = 7 * 24 * time.Hour

// ClaimKey is the Redis key of an ID's claim: "<prefix>:_idem:<id>", with
// the limiter's prefix (redis.key_prefix, "sluice"); a string, the task
// type and who holds it. The leading '_' keeps it out of the limiter's key
// listings, and it has no hash tag, so claims spread over Redis Cluster's
// slots.
func ClaimKey(prefix, id string) string { return control.ClaimKey(prefix, id) }

// claimValue is a claim's value: "<type>|<token>" (claimScript).
func claimValue(taskType, token string) string { return taskType + "|" + token }

// enqueuedToken is the token of a claim whose task was enqueued: the claim
// then holds the key for the task's life, and no caller takes it over or
// gives it back.
const enqueuedToken = "enqueued"

// batchedToken is the token of a claim whose send a batch task carries
// (batch.go): the claim, not asynq, then answers a repeat of the ID, for
// the claim's life; claimScript says batchedHolder.
const batchedToken = "batched"

// batchedHolder is what claimScript returns for a claim kept as batched.
const batchedHolder = "=batched"

// claimScript takes a claim: KEYS[1] the claim; ARGV[1] the task type,
// ARGV[2] the caller's token, ARGV[3] the TTL in ms. A claim's value is
// "<type>|<token>", the token enqueuedToken once its task is enqueued.
// It returns the type holding the key when that is another type; "=" when
// a task of the caller's type was enqueued with it (the claim is left as
// it is: asynq answers a repeat in the same queue itself); batchedHolder
// when a batch task carried a send of the caller's type with it (a
// repeat: asynq has no task of that ID to answer it); else "" after
// setting the caller's value, taking over a claim of the same type that is
// still being enqueued, so that the first caller giving its claim back
// cannot free the key while the second is still enqueuing. The TTL never
// shortens. One script, so two producers cannot both find the key free.
var claimScript = redis.NewScript(`local cur = redis.call('GET', KEYS[1])
if cur then
  if string.sub(cur, 1, #ARGV[1] + 1) ~= ARGV[1] .. '|' then
    return string.match(cur, '^[^|]*')
  end
  if cur == ARGV[1] .. '|enqueued' then
    return '='
  end
  if cur == ARGV[1] .. '|batched' then
    return '=batched'
  end
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < tonumber(ARGV[3]) then
  ttl = tonumber(ARGV[3])
end
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. ARGV[2], 'PX', ttl)
return ''`)

// keepScript marks a claim enqueued: KEYS[1] the claim; ARGV[1] the task
// type, ARGV[2] its TTL in ms, ARGV[3] the token (enqueuedToken, or
// batchedToken for a send a batch task carries). A claim of another type
// is left alone (it cannot be this task's); the TTL never shortens.
var keepScript = redis.NewScript(`local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, #ARGV[1] + 1) ~= ARGV[1] .. '|' then
  return 0
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < tonumber(ARGV[2]) then
  ttl = tonumber(ARGV[2])
end
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. ARGV[3], 'PX', ttl)
return 1`)

// unclaimScript deletes KEYS[1] if it still holds ARGV[1]: a claim a later
// caller of the same type took over is theirs to give back, and an
// enqueued task's claim is never given back.
var unclaimScript = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

// evalPipelined runs script s once per call in one pipeline, by EVALSHA
// (go-redis's Script.Eval in a pipeline sends the whole source each time):
// call(i) gives the i-th call's keys and arguments. Calls that find the
// script missing (NOSCRIPT: a restarted or flushed Redis) never ran; they
// run again in a second pipeline by EVAL, which loads the script on the
// node that serves them (a SCRIPT LOAD would need every Cluster master).
// It returns each call's command, and the first error among them (each
// command holds its own), as Pipelined does.
func evalPipelined(ctx context.Context, rdb redis.UniversalClient, s *redis.Script, n int, call func(i int) ([]string, []any)) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, n)
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range cmds {
			keys, args := call(i)
			cmds[i] = s.EvalSha(ctx, p, keys, args...)
		}
		return nil
	})
	var missing []int
	for i, c := range cmds {
		if redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return cmds, err
	}
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, i := range missing {
			keys, args := call(i)
			cmds[i] = s.Eval(ctx, p, keys, args...)
		}
		return nil
	})
	for _, c := range cmds {
		if err := c.Err(); err != nil && err != redis.Nil {
			return cmds, err
		}
	}
	return cmds, nil
}

package delivery

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/worker"
)

// State is where a message stands. The order, lowest first: archived <
// queued < sent_unconfirmed = sent < delivered < read < failed =
// undelivered; a record only moves up, and failed and undelivered are
// final.
type State string

// States. The worker records StateSent, StateSentUnconfirmed and
// StateArchived; providers report the others (Twilio MessageStatus,
// WhatsApp statuses[].status).
const (
	// StateArchived: the worker gave the task up (Status.Reason says why);
	// the provider never accepted it. A re-run from the queue that is then
	// sent moves it on.
	StateArchived State = "archived"
	// StateQueued: the provider queued the message (Twilio queued,
	// accepted).
	StateQueued State = "queued"
	// StateSentUnconfirmed: the provider answered 2xx but the reply was cut
	// off or had no message id: no callback can find the task.
	StateSentUnconfirmed State = "sent_unconfirmed"
	// StateSent: the provider accepted the message, or reported it sent
	// to the carrier or to WhatsApp.
	StateSent State = "sent"
	// StateDelivered: it reached the recipient's device.
	StateDelivered State = "delivered"
	// StateRead: the recipient read it (WhatsApp; Twilio for WhatsApp
	// senders).
	StateRead State = "read"
	// StateFailed: the provider could not send it (Status.Code and
	// Reason say why).
	StateFailed State = "failed"
	// StateUndelivered: the carrier could not deliver it.
	StateUndelivered State = "undelivered"
)

// Reported reports whether a provider may report s in a callback:
// queued, sent, delivered, read, failed or undelivered.
func (s State) Reported() bool {
	switch s {
	case StateQueued, StateSent, StateDelivered, StateRead, StateFailed, StateUndelivered:
		return true
	}
	return false
}

// Final reports whether s is failed or undelivered, which nothing moves.
func (s State) Final() bool { return s == StateFailed || s == StateUndelivered }

// Status is a task's delivery record (Get), or a status a provider
// reported (Update, which reads State, Code, Reason and At).
type Status struct {
	TaskID, Queue, Channel, Tenant, Campaign string
	// ProviderID is the provider's message id ("SM…", "wamid.…"); "" for
	// an archived task or an unconfirmed send.
	ProviderID string
	State      State
	// Code is the provider's error code (Twilio ErrorCode 30003, WhatsApp
	// errors[].code 131026), or the last answer's for an archived task; 0
	// for none.
	Code int
	// Reason is the provider's error title, or why the worker archived
	// the task; at most MaxReasonBytes.
	Reason string
	// At is when State was reached: the worker's clock for sent and
	// archived, the provider's timestamp or the callback's arrival for
	// the others. Millisecond precision.
	At time.Time
	// SentAt is when the provider accepted the send; zero when it never
	// did.
	SentAt time.Time
}

// Progress counts a tenant's campaign's tasks (tasks.Delivery.Campaign).
type Progress struct {
	// Enqueued: new tasks the producers counted (AddEnqueued).
	Enqueued int64
	// Sent: sends the provider accepted (sent and sent_unconfirmed).
	Sent int64
	// Failed: tasks the worker gave up on and that are still archived.
	Failed int64
	// Delivered: messages that reached delivered or read; Read those read.
	Delivered, Read int64
	// Undelivered: messages the provider accepted and then reported
	// failed or undelivered.
	Undelivered int64
}

// Sent and Failed are the worker's records (worker.DeliveryRecorder).
type (
	Sent   = worker.Sent
	Failed = worker.Failed
)

// Defaults of Options.
const (
	// DefaultTTL is how long records, indexes and counters live after
	// their last write: longer than any retry budget (at most 30 days of
	// max_age is allowed, 1 day by default) is not needed for progress,
	// and a week covers late callbacks.
	DefaultTTL = 7 * 24 * time.Hour
	// DefaultPendingTTL is how long a status reported before the worker
	// recorded its send waits for it.
	DefaultPendingTTL = time.Hour
	// DefaultPrefix is the key prefix when Options.Prefix is empty, the
	// limiter's default (throttle.DefaultPrefix).
	DefaultPrefix = "sluice"
)

// Bounds on what the store accepts: every field may come from a hostile
// or broken request, and each becomes part of a key or a value in Redis.
const (
	MaxIDBytes     = 256 // task ids, provider ids, tenants, queues
	MaxReasonBytes = 500
	maxChannel     = 32
)

// ErrNotFound is Get's error for a task without a record (never sent
// or archived, or older than the TTL).
var ErrNotFound = errors.New("delivery: no record for the task")

// Options configures a Store.
type Options struct {
	// Redis holds the records; usually the limiter's client. Required.
	Redis redis.UniversalClient
	// Prefix starts every key (redis.key_prefix). Zero means
	// DefaultPrefix ("sluice").
	Prefix string
	// TTL is how long a record or index lives after its last write; a
	// campaign's counters live up to a minute longer (a thousandth of the
	// TTL), refreshed at most once a minute by a worker. Zero means
	// DefaultTTL (7 days).
	TTL time.Duration
	// PendingTTL is how long a status reported before its send was
	// recorded waits. Zero means DefaultPendingTTL (1h).
	PendingTTL time.Duration
}

// Store keeps delivery records in Redis. Safe for concurrent use.
type Store struct {
	rdb    redis.UniversalClient
	prefix string
	ttl    time.Duration
	wait   time.Duration
	sent   *sentBatcher // RecordSent's calls, coalesced (sent_batch.go)
}

var (
	_ worker.DeliveryRecorder = (*Store)(nil)
	_ worker.SentLookup       = (*Store)(nil)
)

// invalid is a record the store refuses for its content: it is
// worker.ErrInvalidRecord, so the worker does not keep it to write again.
type invalid struct{ error }

func (e invalid) Unwrap() error        { return e.error }
func (e invalid) Is(target error) bool { return target == worker.ErrInvalidRecord }

// New validates o and returns the store.
func New(o Options) (*Store, error) {
	if o.Redis == nil {
		return nil, errors.New("delivery: Options.Redis is required")
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.PendingTTL == 0 {
		o.PendingTTL = DefaultPendingTTL
	}
	if o.TTL < time.Second {
		return nil, fmt.Errorf("delivery: Options.TTL: %v, want at least 1s", o.TTL)
	}
	if o.PendingTTL < time.Second {
		return nil, fmt.Errorf("delivery: Options.PendingTTL: %v, want at least 1s", o.PendingTTL)
	}
	st := &Store{rdb: o.Redis, prefix: o.Prefix, ttl: o.TTL, wait: o.PendingTTL}
	st.sent = newSentBatcher(st)
	return st, nil
}

//go:embed lua/*.lua
var luaFiles embed.FS

var (
	recordSentScript   = redis.NewScript(joinLua("states.lua", "record_sent.lua"))
	recordFailedScript = redis.NewScript(joinLua("record_failed.lua"))
	updateScript       = redis.NewScript(joinLua("states.lua", "update.lua"))
)

// joinLua joins the named embedded scripts into one.
func joinLua(names ...string) string {
	var b strings.Builder
	for _, n := range names {
		src, err := luaFiles.ReadFile("lua/" + n)
		if err != nil {
			panic("delivery: embedded script missing: " + n) // a build defect
		}
		b.Write(src)
		b.WriteByte('\n')
	}
	return b.String()
}

// RecordSent records a send the provider accepted, in one script call
// shared with the calls that arrive meanwhile (sent_batch.go; a call may
// wait for the one in flight to end): the
// task's record (state s.Status, "sent" or "sent_unconfirmed"), the index
// from s.ProviderID to the task, a status a callback reported before, and
// the campaign's Sent counter (once per task: calling it again for the
// same send changes nothing but the TTLs). The error names a bad field
// (wrapping worker.ErrInvalidRecord), or is ctx's, or wraps Redis's (every
// send that shared the script call gets it; calling again is safe).
func (s *Store) RecordSent(ctx context.Context, r Sent) error {
	c, err := s.sentCallFor(ctx, r)
	if err != nil {
		return err
	}
	if err := s.sent.do(ctx, c); err != nil {
		return fmt.Errorf("delivery: record sent %s: %w", r.TaskID, err)
	}
	return nil
}

// sentCallFor is RecordSent's call of record_sent.lua for r: a kept send
// (worker.KeptRecord) is due at once, any other waits the linger of a busy
// store (sent_batch.go, sentLinger).
func (s *Store) sentCallFor(ctx context.Context, r Sent) (*sentCall, error) {
	c, err := s.sentCallOf(r)
	if err == nil && worker.KeptRecord(ctx) {
		c.due = time.Time{}
	}
	return c, err
}

// sentCallOf checks r and returns its call of record_sent.lua.
func (s *Store) sentCallOf(r Sent) (*sentCall, error) {
	st := State(r.Status)
	if st != StateSent && st != StateSentUnconfirmed {
		return nil, invalid{fmt.Errorf("delivery: record sent: status %.40q, want sent or sent_unconfirmed", r.Status)}
	}
	if err := checkCommon(r.TaskID, r.Queue, r.Channel, r.Tenant, r.Campaign); err != nil {
		return nil, invalid{fmt.Errorf("delivery: record sent: %w", err)}
	}
	if r.ProviderID != "" {
		if err := checkID("provider id", r.ProviderID); err != nil {
			return nil, invalid{fmt.Errorf("delivery: record sent: %w", err)}
		}
	}
	group := Group(r.Tenant, r.Campaign)
	keys := []string{RecordKey(s.prefix, r.TaskID), CountersKey(s.prefix, group)}
	if r.ProviderID != "" {
		keys = append(keys, IndexKey(s.prefix, r.Channel, r.ProviderID))
	}
	return &sentCall{keys: keys, done: make(chan error, 1), due: lingerFreely,
		args: []any{r.TaskID, r.Queue, r.Channel, r.Tenant, r.ProviderID, r.Status, unixMilli(r.At), s.ttl.Milliseconds(), group, r.Campaign}}, nil
}

// SentAt returns when the provider accepted the task's send, as recorded by
// RecordSent (r.At, millisecond precision), or the zero time when the
// store has no record of an accepted send for it (never sent, archived
// without one, or older than the TTL). One round trip (HGET). It is the
// worker's worker.SentLookup: a rerun of a task already sent completes
// without a second send. The error names a bad id or wraps Redis's.
func (s *Store) SentAt(ctx context.Context, taskID, queue string) (time.Time, error) {
	if err := checkID("task id", taskID); err != nil {
		return time.Time{}, fmt.Errorf("delivery: sent at: %w", err)
	}
	v, err := s.rdb.HMGet(ctx, RecordKey(s.prefix, taskID), "sent_at", "queue").Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("delivery: sent at %s: %w", taskID, err)
	}
	at, _ := v[0].(string)
	q, _ := v[1].(string)
	if at == "" || q != queue {
		// Not sent, or a record of another queue's task with this ID
		// (asynq IDs are unique per queue).
		return time.Time{}, nil
	}
	return fromMilli(at), nil
}

// countersTTL is how long a campaign's counters live after their last
// extension: the TTL and countersEvery, so that they outlive every record
// of theirs (see countersEvery).
func (s *Store) countersTTL() time.Duration { return s.ttl + countersEvery(s.ttl) }

// RecordFailed records a task the worker gave up on (state archived, with
// f.Code and f.Reason) and counts it in the campaign's Failed counter once.
// A record of a send the provider accepted is left as it is.
func (s *Store) RecordFailed(ctx context.Context, f Failed) error {
	if err := checkCommon(f.TaskID, f.Queue, f.Channel, f.Tenant, f.Campaign); err != nil {
		return fmt.Errorf("delivery: record failed: %w", err)
	}
	group := Group(f.Tenant, f.Campaign)
	keys := []string{RecordKey(s.prefix, f.TaskID), CountersKey(s.prefix, group)}
	err := recordFailedScript.Run(ctx, s.rdb, keys, f.TaskID, f.Queue, f.Channel, f.Tenant, f.Code, CleanReason(f.Reason),
		unixMilli(f.At), s.ttl.Milliseconds(), group, f.Campaign, s.countersTTL().Milliseconds()).Err()
	if err != nil {
		return fmt.Errorf("delivery: record failed %s: %w", f.TaskID, err)
	}
	return nil
}

// maxUpdateRounds bounds Update's reads when the index changes under it
// (the worker recording the send at that instant).
const maxUpdateRounds = 3

// Applied is what Update did with a status.
type Applied struct {
	// TaskID is the message's task, when Found.
	TaskID string
	// Found: the worker had recorded the send; else the status waits.
	Found bool
	// Moved: the record moved to the status (Found and not stale), or,
	// when not Found, the status waiting for the record did. A repeated or
	// late status does not move either, so feedback on it must not be
	// applied twice.
	Moved bool
	// SentAt is when the provider accepted the send (the worker's clock),
	// when Moved; zero when unknown.
	SentAt time.Time
}

// Update applies a status a provider reported for its message providerID
// on channel (st.State, one of the Reported states, with st.Code,
// st.Reason and st.At; a zero At means now). Found is true when the worker
// recorded the send (TaskID names its task); the record then moves to
// st.State only if that ranks above its state (a late "sent" after
// "delivered" changes nothing: Moved false), and the move is counted in the
// campaign's Progress. Found is false for a message the worker has not
// recorded yet (or never sent: another app's, or older than the TTL): the
// status then waits PendingTTL for RecordSent, and Moved says whether it
// ranks above the status already waiting. Two round trips.
func (s *Store) Update(ctx context.Context, channel, providerID string, st Status) (Applied, error) {
	if !st.State.Reported() {
		return Applied{}, fmt.Errorf("delivery: update: state %.40q, want queued, sent, delivered, read, failed or undelivered", st.State)
	}
	if err := checkChannel(channel); err != nil {
		return Applied{}, fmt.Errorf("delivery: update: %w", err)
	}
	if err := checkID("provider id", providerID); err != nil {
		return Applied{}, fmt.Errorf("delivery: update: %w", err)
	}
	if st.At.IsZero() {
		st.At = time.Now()
	}
	index := IndexKey(s.prefix, channel, providerID)
	for range maxUpdateRounds {
		cur, err := s.rdb.HMGet(ctx, index, "task", "group").Result()
		if err != nil {
			return Applied{}, fmt.Errorf("delivery: update %s: %w", providerID, err)
		}
		task, group := str(cur, 0), str(cur, 1)
		keys := []string{index}
		if task != "" {
			keys = append(keys, RecordKey(s.prefix, task), CountersKey(s.prefix, group))
		}
		res, err := updateScript.Run(ctx, s.rdb, keys, task, string(st.State), st.Code, CleanReason(st.Reason),
			unixMilli(st.At), s.wait.Milliseconds(), group, s.countersTTL().Milliseconds()).Slice()
		if err != nil {
			return Applied{}, fmt.Errorf("delivery: update %s: %w", providerID, err)
		}
		if len(res) < 2 {
			return Applied{}, fmt.Errorf("delivery: update %s: malformed reply of %d values", providerID, len(res))
		}
		code, ok1 := res[0].(int64)
		id, ok2 := res[1].(string)
		if !ok1 || !ok2 {
			return Applied{}, fmt.Errorf("delivery: update %s: malformed reply %T %T", providerID, res[0], res[1])
		}
		switch code {
		case -1:
			continue
		case 2:
			return Applied{}, nil
		case 3:
			return Applied{Moved: true}, nil
		}
		a := Applied{TaskID: id, Found: true, Moved: code == 1}
		if len(res) > 2 {
			if ms, ok := res[2].(string); ok {
				a.SentAt = fromMilli(ms)
			}
		}
		return a, nil
	}
	return Applied{}, fmt.Errorf("delivery: update %s: its index kept changing", providerID)
}

// Get returns the task's record, or ErrNotFound.
func (s *Store) Get(ctx context.Context, taskID string) (*Status, error) {
	if err := checkID("task id", taskID); err != nil {
		return nil, fmt.Errorf("delivery: get: %w", err)
	}
	m, err := s.rdb.HGetAll(ctx, RecordKey(s.prefix, taskID)).Result()
	if err != nil {
		return nil, fmt.Errorf("delivery: get %s: %w", taskID, err)
	}
	if len(m) == 0 || m["state"] == "" {
		return nil, ErrNotFound
	}
	// (A record RecordSent made holds no code or reason: 0 and none.)
	code, _ := strconv.Atoi(m["code"])
	return &Status{TaskID: m["task_id"], Queue: m["queue"], Channel: m["channel"], Tenant: m["tenant"], Campaign: m["campaign"],
		ProviderID: m["provider_id"], State: State(m["state"]), Code: code, Reason: m["reason"],
		At: fromMilli(m["at"]), SentAt: fromMilli(m["sent_at"])}, nil
}

// Progress returns the counters of the tenant's campaign ("" counts tasks
// without a tenant or campaign); all zero for one the store has not seen.
func (s *Store) Progress(ctx context.Context, tenant, campaign string) (Progress, error) {
	if len(campaign) > MaxIDBytes || len(tenant) > MaxIDBytes {
		return Progress{}, fmt.Errorf("delivery: progress: tenant or campaign over %d bytes", MaxIDBytes)
	}
	v, err := s.rdb.HMGet(ctx, CountersKey(s.prefix, Group(tenant, campaign)), "sent", "failed", "delivered", "read", "undelivered", "enqueued").Result()
	if err != nil {
		return Progress{}, fmt.Errorf("delivery: progress %.40q: %w", campaign, err)
	}
	n := func(i int) int64 { x, _ := strconv.ParseInt(str(v, i), 10, 64); return x }
	return Progress{Sent: n(0), Failed: n(1), Delivered: n(2), Read: n(3), Undelivered: n(4), Enqueued: n(5)}, nil
}

// AddEnqueued counts n new tasks (not repeats of an idempotency key) of
// the tenant's campaign, for Progress.Enqueued: the producer calls it
// after enqueuing them (`sluice send`, the API's batches). A campaign is
// done when Sent + Failed reaches Enqueued.
func (s *Store) AddEnqueued(ctx context.Context, tenant, campaign string, n int) error {
	if n <= 0 || campaign == "" {
		return nil
	}
	if len(campaign) > MaxIDBytes || len(tenant) > MaxIDBytes {
		return fmt.Errorf("delivery: add enqueued: tenant or campaign over %d bytes", MaxIDBytes)
	}
	key := CountersKey(s.prefix, Group(tenant, campaign))
	pipe := s.rdb.TxPipeline()
	pipe.HIncrBy(ctx, key, "enqueued", int64(n))
	pipe.PExpire(ctx, key, s.countersTTL())
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("delivery: add enqueued %.40q: %w", campaign, err)
	}
	return nil
}

// checkCommon checks the fields every worker record has.
func checkCommon(taskID, queue, channel, tenant, campaign string) error {
	if err := checkID("task id", taskID); err != nil {
		return err
	}
	if err := checkID("queue", queue); err != nil {
		return err
	}
	if err := checkChannel(channel); err != nil {
		return err
	}
	if len(tenant) > MaxIDBytes || !utf8.ValidString(tenant) {
		return fmt.Errorf("tenant: want at most %d bytes of UTF-8, got %d bytes", MaxIDBytes, len(tenant))
	}
	if len(campaign) > MaxIDBytes || !utf8.ValidString(campaign) {
		return fmt.Errorf("campaign: want at most %d bytes of UTF-8, got %d bytes", MaxIDBytes, len(campaign))
	}
	return nil
}

// checkID accepts 1 to MaxIDBytes printable ASCII characters without
// spaces: what task ids, queue names and provider message ids are.
func checkID(field, s string) error {
	if s == "" {
		return fmt.Errorf("%s: required", field)
	}
	if len(s) > MaxIDBytes {
		return fmt.Errorf("%s: %d bytes, want at most %d", field, len(s), MaxIDBytes)
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return fmt.Errorf("%s: want printable ASCII without spaces, got byte %#x at %d", field, s[i], i)
		}
	}
	return nil
}

// checkChannel accepts a channel name: 1 to 32 of a-z, 0-9, _ and -.
func checkChannel(s string) error {
	if s == "" || len(s) > maxChannel {
		return fmt.Errorf("channel: want 1 to %d characters, got %d", maxChannel, len(s))
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return fmt.Errorf("channel: want a-z, 0-9, _ or -, got %q", r)
		}
	}
	return nil
}

// CleanReason makes a reason fit to store and show: valid UTF-8, control
// characters as spaces, at most MaxReasonBytes.
func CleanReason(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	s = strings.TrimSpace(s)
	if len(s) > MaxReasonBytes {
		cut := MaxReasonBytes
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}

func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		t = time.Now()
	}
	return t.UnixMilli()
}

func fromMilli(s string) time.Time {
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// str is v[i] as a string; "" for nil (a missing field) or another type.
func str(v []any, i int) string {
	if i >= len(v) {
		return ""
	}
	s, _ := v[i].(string)
	return s
}

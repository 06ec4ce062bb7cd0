package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
)

// Prepared is a decoded, valid task, ready to send.
type Prepared struct {
	// Fields are the values key templates may use (tasks' Fields()).
	Fields map[string]string
	// Send makes the provider request once. A paced send's lateness is
	// measured when its HTTP request is written: make it with ctx
	// (http.NewRequestWithContext), which carries the worker's
	// httptrace.ClientTrace; otherwise it is measured when Send is called.
	Send func(ctx context.Context) (channels.Response, error)
	// Priority is the send's place among sends on the same limits:
	// throttle.High overtakes planned bulk sends.
	Priority throttle.Priority
	// Tenant is who the send is for (tasks.Delivery.Tenant): tenants
	// backlogged on one limit share it by Channel.TenantWeights.
	Tenant string
	// Campaign is the group the send belongs to (tasks.Delivery.Campaign),
	// whose outcomes the DeliveryRecorder counts; "" for none.
	Campaign string
}

// Reserver is implemented by limiters that pace sends by reservation
// (*throttle.Redis). With one, a channel's GCRA limits are paced: each send
// takes a firm slot and is held until its instant, or is planned and comes
// back for its slot (see throttle.Redis.Reserve). Without one
// (throttle.Local), sends are decided with Consume, and a blocked send
// comes back at a whole second: a per-second GCRA cap then loses most of
// its slots, so give such a worker fixed_window per-second caps.
type Reserver interface {
	Reserve(ctx context.Context, opts throttle.ReserveOptions, reqs ...throttle.Request) (throttle.Reservation, error)
}

// ScopeChannel is the pause scope of a whole channel, the one `sluice
// channels pause` sets (key "<channel>:paused:channel"). Every channel of a
// worker with a Pauser has it, beside its PauseScopes.
const ScopeChannel = "channel"

// ScopeHost is how sluice_provider_throttles_total names the sender scope of
// webhooks and HTTP calls (HostPauseScopes): the target host they pause.
const ScopeHost = "host"

// Pauser is implemented by limiters that pause a scope in every worker
// (*throttle.Redis): with one, a provider throttle pauses the scope it names
// (Channel.PauseScopes), every send of that scope is blocked until the
// pause ends, and the pause is reported as events.
type Pauser interface {
	Pause(ctx context.Context, key string, o throttle.PauseOptions) (throttle.Paused, error)
	Emit(ctx context.Context, typ, key string, once time.Duration, fields ...any)
}

// Channel binds a task type to its limits and its provider client.
type Channel struct {
	Name     string // "whatsapp"; the limiter scope and the metrics label
	TaskType string // "whatsapp:send"
	// Queue is the asynq queue the channel's tasks are enqueued to
	// (channels.<name>.queue; producer.Client enqueues them there). The worker runs the
	// channel's tasks only from it: one found in another queue (a
	// whatsapp:send in the sms queue) is archived unsent. Empty means
	// tasks.DefaultQueue(TaskType), or Name for a type the tasks package
	// does not know.
	Queue string
	// Rules are the channel's limits (rules.Rule); Handler compiles them
	// with rules.Compile, placeholders checked against
	// tasks.FieldNames(TaskType) when the tasks registry knows the type.
	Rules []rules.Rule
	// Prepare decodes and validates a payload. An error archives the task
	// with the error as its reason: a malformed payload never gets better.
	Prepare func(payload []byte) (Prepared, error)
	// ThrottleBackoff is the wait after a provider throttle response that
	// names no delay. Zero means 1s.
	ThrottleBackoff time.Duration
	// PairBackoff is that wait when the throttle concerns one recipient
	// (WhatsApp 131056, Twilio 14107); channels.<name>.pair_backoff. Zero
	// means DefaultPairBackoff (6s, WhatsApp's pair interval).
	PairBackoff time.Duration
	// MaxRetryAfter caps the wait a provider asks for (Retry-After and the
	// like): a longer one is cut to MaxRetryAfter, so a hostile or broken
	// answer cannot park a task for years. Zero means DefaultMaxRetryAfter.
	MaxRetryAfter time.Duration
	// Headroom widens the pacing of the channel's GCRA limits by this
	// fraction, so jitter between Sluice and the provider never puts more
	// than a limit into any span the provider counts (0.015: 80/s is paced at
	// 78.8/s). Zero means throttle.DefaultHeadroom; enqueue-time planning
	// must use the same value. NoHeadroom (any negative value) means none:
	// the measured margin (MaxMargin) may still widen the spacing.
	Headroom float64
	// MaxMargin bounds the pacing margin the worker measures (margin.go):
	// the spacing of the channel's paced limits absorbs a send leaving up
	// to the margin after its slot, and the margin widens, from the
	// Headroom's, to how late the channel's sends actually leave on this
	// host (the 99.9th percentile of the last 10-20s) and to what throttles
	// after late departures taught, never past MaxMargin. Zero means
	// DefaultMaxMargin (50ms: 4.8% headroom); FixedMargin (any negative
	// value) keeps the Headroom fixed.
	MaxMargin time.Duration
	// Hold is the longest a send with a firm reservation is held in the
	// worker before its instant. Zero means throttle.DefaultHold (2s:
	// asynq schedules in whole seconds).
	Hold time.Duration
	// BatchSends has producers carry the channel's sends planned for the
	// same second in batch tasks (tasks.TypeBatch; batch.go). It is the
	// producer's setting: a Worker runs batch tasks whatever it says.
	BatchSends bool
	// TenantWeights are the tenants' share weights on the channel's paced
	// limits (tenant → weight, 0 < weight <= throttle.MaxTenantWeight); a
	// tenant not listed weighs 1. Enqueue-time planning must use the same.
	TenantWeights map[string]float64
	// PauseScopes maps a provider throttle's scope (channels.ScopeSender,
	// ScopePair, ScopeAccount) to the fields that name it, as a key
	// template's tail: "{phone_number_id}" pauses
	// "whatsapp:paused:sender:{phone_number_id}" (throttle.PauseKey); ""
	// pauses the whole channel. A throttle whose scope is not listed, or
	// whose fields are empty, pauses nothing and only requeues its task.
	PauseScopes map[string]string
	// SpreadBy names the task field (tasks.FieldNames of TaskType) whose
	// value makes the scope of every rule key and pause scope naming it
	// finer (rules.Template.SpreadBy): with "phone_number_id",
	// "whatsapp:number:{phone_number_id}" is kept as
	// "whatsapp/106540352242922:number:106540352242922", so that on a Redis
	// Cluster each number's limits and pauses sit on the master of their
	// own hash tag, decided together in one script, and a channel's numbers
	// spread over the masters. Keys that do not name it (a recipient's
	// daily window, the channel's pause) stay in the channel's scope and are
	// decided, on a Redis Cluster, just before the paced scope's slot
	// (throttle.Redis.Reserve).
	// The keys change with it: limits start over, as after `sluice limits
	// reset`. "" keeps one scope per channel.
	SpreadBy string
	// QueueGroups, with SpreadBy, splits the channel's queue into groups
	// (tasks.GroupQueues: "whatsapp.g0" … "whatsapp.g<n-1>", served besides
	// Queue): a producer puts each send in the group its SpreadBy value
	// falls in (tasks.GroupQueue), so that on a Redis Cluster the asynq work
	// of a channel's senders spreads over the masters as their limits do.
	// 0 or 1 keeps one queue; at most tasks.MaxQueueGroups.
	QueueGroups int
	// Probe asks the provider, sending nothing, whether the channel's
	// credentials work (channels.WhatsApp.Probe, channels.Twilio.Probe);
	// fields are the Prepared.Fields of the send that was refused. After an
	// Unauthorized answer (WhatsApp 190, Twilio 20003, HTTP 401/403) the
	// channel is paused in every worker and one worker at a time probes,
	// ProbeEvery apart and doubling up to ProbeMax; the first probe that
	// succeeds resumes the channel and runs the tasks that waited. nil: the
	// channel stays paused until `sluice channels resume` or AuthPause ends.
	Probe func(ctx context.Context, fields map[string]string) error
	// ProbeEvery is the first interval between probes; zero means
	// DefaultProbeEvery (30s). ProbeMax caps the doubling interval; zero
	// means DefaultProbeMax (10m).
	ProbeEvery, ProbeMax time.Duration
	// AuthPause is the longest an Unauthorized answer pauses the channel
	// when neither a probe nor an operator resumes it sooner; zero means
	// MaxRetryAfter (24h). The waiting tasks come back then, and the first
	// one refused pauses the channel again.
	AuthPause time.Duration
	// MaxPayloadBytes caps a task's payload; a larger task is archived
	// before it is decoded. Zero means tasks.MaxPayloadBytes(TaskType), or
	// no cap for a task type the tasks package does not know.
	MaxPayloadBytes int
	// Retry is how much failing (provider throttles, transient failures) a
	// task may do before it is archived with the reason; Sluice's own
	// blocks never count. A task's own asynq MaxRetry(n) caps it too, at n
	// failed attempts: asynq archives a task whose retries are spent on
	// any error, Sluice's blocks included. Zero means DefaultProviderRetry.
	Retry RetryBudget
	// Endpoint is a key template naming the endpoint of a send
	// ("webhook:endpoint:{host}"): a task that spends its Retry budget
	// raises throttle.EventEndpointFailing for it. "" raises none.
	Endpoint string
	// Adaptive tunes adaptive limits (worker/adapt.go, docs/adaptive.md):
	// with a limiter that has them (Adapter), a provider's rate throttle
	// lowers the rate of the limits its scope concerns and quiet periods
	// raise it back. Zero fields mean the throttle.DefaultAdapt* values;
	// Disabled turns it off.
	Adaptive throttle.AdaptOptions
}

// Queues returns every queue the channel's workers serve: its queue and
// its groups (tasks.GroupQueues).
func (ch Channel) Queues() []string {
	return tasks.GroupQueues(ch.queueName(), ch.groups())
}

// QueueFor returns the queue of a send with fields (the payload's
// Fields()): its SpreadBy value's group (tasks.GroupQueue), else the
// channel's queue.
func (ch Channel) QueueFor(fields map[string]string) string {
	n := ch.groups()
	if n <= 1 {
		return ch.queueName()
	}
	return tasks.GroupQueue(ch.queueName(), n, fields[ch.SpreadBy])
}

// checkGroups checks QueueGroups' range.
func (ch Channel) checkGroups() error {
	if ch.QueueGroups < 0 || ch.QueueGroups > tasks.MaxQueueGroups {
		return fmt.Errorf("channel %s: QueueGroups %d: want 0 to %d", ch.Name, ch.QueueGroups, tasks.MaxQueueGroups)
	}
	return nil
}

// groups is QueueGroups where it applies: with SpreadBy.
func (ch Channel) groups() int {
	if ch.SpreadBy == "" {
		return 1
	}
	return ch.QueueGroups
}

// queueName is Queue with its default: tasks.DefaultQueue(TaskType), else
// Name.
func (ch Channel) queueName() string {
	if ch.Queue != "" {
		return ch.Queue
	}
	if q := tasks.DefaultQueue(ch.TaskType); q != "" {
		return q
	}
	return ch.Name
}

// headroom is Headroom with its defaults: zero means
// throttle.DefaultHeadroom, negative none. Handler and Pacing share it,
// so that planning and pacing agree.
func (ch Channel) headroom() float64 {
	switch {
	case ch.Headroom == 0:
		return throttle.DefaultHeadroom
	case ch.Headroom < 0:
		return 0
	}
	return ch.Headroom
}

func (ch Channel) checkWeights() error {
	for t, w := range ch.TenantWeights {
		if !(w > 0 && w <= throttle.MaxTenantWeight) {
			return fmt.Errorf("channel %s: tenant %.40q: weight %v, want more than 0 and at most %d", ch.Name, t, w, throttle.MaxTenantWeight)
		}
	}
	return nil
}

// weight is a tenant's share weight: TenantWeights', else 1.
func (ch Channel) weight(tenant string) float64 {
	if w, ok := ch.TenantWeights[tenant]; ok && w > 0 {
		return w
	}
	return 1
}

// Defaults of Options and Channel, read by config.Default too, so the two
// cannot drift.
const (
	// DefaultConcurrency is Options.Concurrency's default: sends wait on the
	// network, not the CPU, and a paced send holds its slot while it waits
	// for its instant (up to Channel.Hold). asynq releases planned sends at
	// whole seconds, so at the start of each second a worker takes the
	// second's sends and holds each until its slot: it needs about its
	// share of the combined paced rate × 1 s, plus the sends in flight.
	// 2,000 serves 2,000 paced sends a second per worker process (25
	// WhatsApp numbers at 80/s); at 400, two workers held 30 numbers to
	// 0.56 of their cap at worst, 0.72 for the median (`make bench-scale`,
	// issue 22).
	DefaultConcurrency = 2000
	// DefaultDelayedTaskCheckInterval is Options.DelayedTaskCheckInterval's
	// default; MaxDelayedTaskCheckInterval its largest value, so that a
	// throttled task comes back within a second of its wait.
	DefaultDelayedTaskCheckInterval = 100 * time.Millisecond
	MaxDelayedTaskCheckInterval     = time.Second
	// DefaultTaskCheckInterval is Options.TaskCheckInterval's default.
	DefaultTaskCheckInterval = 50 * time.Millisecond
	// DefaultShutdownTimeout is Options.ShutdownTimeout's default.
	DefaultShutdownTimeout = 30 * time.Second
	// DefaultThrottleBackoff is Channel.ThrottleBackoff's default.
	DefaultThrottleBackoff = time.Second
	// DefaultPairBackoff is Channel.PairBackoff's default: WhatsApp's pair
	// interval, one message per 6 s to one recipient (error 131056).
	DefaultPairBackoff = 6 * time.Second
	// DefaultMaxRetryAfter is Channel.MaxRetryAfter's default: 24h, the
	// longest documented provider wait (daily limits reset within a day).
	DefaultMaxRetryAfter = 24 * time.Hour
)

// Explicit zeros of Channel fields whose zero value means their default.
const (
	// NoHeadroom is Channel.Headroom's "none": the paced limits are spaced
	// at exactly their interval (the measured margin may still widen it).
	// config's channels.<name>.headroom: 0% lands as it.
	NoHeadroom = -1.0
	// FixedMargin is Channel.MaxMargin's "none": the worker never widens
	// the spacing past the Headroom's. config's channels.<name>.max_margin:
	// 0 lands as it.
	FixedMargin time.Duration = -1
)

// Options configures a Worker.
type Options struct {
	// Redis is where asynq keeps the queues; usually the limiter's client, so
	// one connection pool serves both. Not closed by the Worker. Required.
	Redis redis.UniversalClient
	// Limiter decides the channels' limits. Required.
	Limiter  throttle.Limiter
	Channels []Channel
	// Queues maps queue names to priority weights. Zero means each
	// channel's queues (Channel.Queues: its queue, named after it, and its
	// queue groups) at weight 1, so one channel's backlog never delays
	// another.
	Queues map[string]int
	// Concurrency is the number of tasks processed at once, held paced
	// sends included. Zero means DefaultConcurrency (2,000).
	Concurrency int
	// DelayedTaskCheckInterval is how often due throttled and retried tasks
	// move back to their queue; at most 1s so waits are honoured within a
	// second. Zero means 100ms.
	DelayedTaskCheckInterval time.Duration
	// TaskCheckInterval is how long an idle processor waits before polling
	// empty queues again. Zero means 50ms.
	TaskCheckInterval time.Duration
	// ShutdownTimeout is how long in-flight sends may run after Shutdown
	// before they are pushed back to their queue. Zero means 30s.
	ShutdownTimeout time.Duration
	// Logger receives structured logs; nil means slog.Default().
	Logger *slog.Logger
	// Metrics records Prometheus series; nil records nothing.
	Metrics *Metrics
	// Delivery records each send the provider accepted and each task the
	// worker gives up on (internal/delivery.Store); nil records nothing.
	// Its errors are logged, never failing a task; a send whose record
	// fails is kept in memory and recorded when Redis answers again. With
	// a recorder that is also a SentLookup, a task that asynq runs again
	// after its send, having lost its completion in a Redis outage,
	// completes without a second send (docs/redis-outages.md); nil, or a
	// recorder without SentLookup, gives no such guard.
	Delivery DeliveryRecorder
}

// Worker is an asynq server with a throttled handler per channel.
type Worker struct {
	opts   Options
	srv    *asynq.Server
	mux    *asynq.ServeMux
	logger *slog.Logger
	pauses pauseBook
	// pushes are the recent pushes after late sends (pushbook.go); nil
	// when the limiter announces none. pushing counts the pushes this
	// worker's late sends make (departure.pushIfLate): Shutdown waits for
	// them (each bounded by latePushTimeout).
	pushes  *pushBook
	pushing sync.WaitGroup
	// pushMu guards pushClosed, set by Shutdown before it waits on
	// pushing: a handler asynq abandoned at its shutdown timeout may still
	// finish a send, and its push must not Add to pushing during Wait.
	pushMu     sync.Mutex
	pushClosed bool
	// handlers are the channels' handlers by Channel.Name, for Feedback.
	handlers map[string]*handler
	stop     context.CancelFunc // ends the background loops (startBackground)
	done     chan struct{}
	// probeTick is the probe loop's tick; zero means probeTick (tests
	// shorten it).
	probeTick time.Duration
	// unrecorded keeps the sends whose delivery record Redis refused; nil
	// without Options.Delivery.
	unrecorded *unrecorded
	// insp runs planned tasks early (pullNext) and finds the sends of a
	// batch that have their own task; nil without Options.Redis.
	insp *asynq.Inspector
	// client enqueues the own tasks of a batch's sends (batch.go).
	client *asynq.Client
	// members holds a place for each batch's send in flight, at most
	// Options.Concurrency (batch.go).
	members chan struct{}
}

// pauseWatcher is implemented by limiters that announce pauses
// (*throttle.Redis).
type pauseWatcher interface {
	WatchPauses(ctx context.Context, fn func(key string, left time.Duration)) error
}

// New validates opts and builds the worker.
func New(opts Options) (*Worker, error) {
	if opts.Redis == nil {
		return nil, errors.New("worker: Options.Redis is required")
	}
	if opts.Limiter == nil {
		return nil, errors.New("worker: Options.Limiter is required")
	}
	if len(opts.Channels) == 0 {
		return nil, errors.New("worker: Options.Channels is empty")
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.DelayedTaskCheckInterval == 0 {
		opts.DelayedTaskCheckInterval = DefaultDelayedTaskCheckInterval
	}
	if opts.DelayedTaskCheckInterval > MaxDelayedTaskCheckInterval {
		return nil, fmt.Errorf("worker: Options.DelayedTaskCheckInterval: %v is over %v; throttled tasks would come back late", opts.DelayedTaskCheckInterval, MaxDelayedTaskCheckInterval)
	}
	if opts.TaskCheckInterval == 0 {
		opts.TaskCheckInterval = DefaultTaskCheckInterval
	}
	if opts.ShutdownTimeout == 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if len(opts.Queues) == 0 {
		opts.Queues = map[string]int{}
		for _, ch := range opts.Channels {
			for _, q := range ch.Queues() {
				opts.Queues[q] = 1
			}
		}
	}
	for _, ch := range opts.Channels {
		// A group the server does not serve would hold its senders' sends
		// for ever (the channel's own queue may be left out: the caller
		// routes its tasks).
		if qs := ch.Queues(); len(qs) > 1 {
			for _, q := range qs[1:] {
				if _, ok := opts.Queues[q]; !ok {
					return nil, fmt.Errorf("worker: Options.Queues: no weight for queue %q, a queue group of channel %s (QueueGroups %d)", q, ch.Name, ch.QueueGroups)
				}
			}
		}
	}
	w := &Worker{opts: opts, mux: asynq.NewServeMux(), logger: opts.Logger, handlers: map[string]*handler{},
		members: make(chan struct{}, opts.Concurrency)}
	if _, ok := opts.Limiter.(pushWatcher); ok {
		w.pushes = &pushBook{}
	}
	if opts.Delivery != nil {
		w.unrecorded = newUnrecorded(opts.Delivery, max(minUnrecorded, 2*opts.Concurrency), opts.Logger, opts.Metrics)
	}
	if opts.Redis != nil {
		w.insp = asynq.NewInspectorFromRedisClient(opts.Redis)
		w.client = asynq.NewClientFromRedisClient(opts.Redis)
	}
	opts.Metrics.watchAdaptive(opts.Limiter)
	known := make(map[string]string, len(opts.Channels)) // task type → channel
	for i, ch := range opts.Channels {
		if _, dup := w.handlers[ch.Name]; dup {
			return nil, fmt.Errorf("worker: Options.Channels[%d]: channel %.40q is given twice", i, ch.Name)
		}
		h, err := w.handler(ch)
		if err != nil {
			return nil, fmt.Errorf("worker: Options.Channels[%d]: %w", i, err)
		}
		w.mux.Handle(ch.TaskType, asynq.HandlerFunc(h.serve))
		w.handlers[ch.Name] = h
		known[ch.TaskType] = ch.Name
	}
	w.mux.Handle(tasks.TypeBatch, asynq.HandlerFunc(w.serveBatch))
	w.mux.Use(archiveMarked, w.exactTypes(known))
	opts.Metrics.watchMargins(w)
	w.srv = asynq.NewServerFromRedisClient(opts.Redis, asynq.Config{
		Concurrency:              opts.Concurrency,
		Queues:                   opts.Queues,
		IsFailure:                IsFailure,
		RetryDelayFunc:           RetryDelay,
		DelayedTaskCheckInterval: opts.DelayedTaskCheckInterval,
		TaskCheckInterval:        opts.TaskCheckInterval,
		ShutdownTimeout:          opts.ShutdownTimeout,
		ErrorHandler:             asynq.ErrorHandlerFunc(w.logError),
		Logger:                   asynqLogger{opts.Logger},
		LogLevel:                 asynq.WarnLevel,
	})
	return w, nil
}

// Mux returns the task router (one handler per channel), e.g. to run in
// another asynq.Server.
func (w *Worker) Mux() *asynq.ServeMux { return w.mux }

// Start begins processing in the background: asynq's server, and with a
// limiter that pauses (*throttle.Redis) the watch of pause announcements
// and the probe loop of channels paused for their credentials.
func (w *Worker) Start() error {
	if w.stop == nil {
		w.startBackground()
	}
	if err := w.srv.Start(w.mux); err != nil {
		if w.stop != nil {
			w.stop()
			<-w.done
			w.stop = nil
		}
		return err
	}
	return nil
}

// startBackground starts the pause and push watches, the probe loop and
// the margins' publishing, those the limiter has; w.stop ends them and
// w.done is closed when all have.
func (w *Worker) startBackground() {
	pw, watch := w.opts.Limiter.(pauseWatcher)
	pr, probe := w.opts.Limiter.(prober)
	var probed []Channel
	for _, ch := range w.opts.Channels {
		if ch.Probe != nil {
			probed = append(probed, ch.credentialTimes())
		}
	}
	probe = probe && len(probed) > 0
	mp, publish := w.opts.Limiter.(marginPublisher)
	xw, pushes := w.opts.Limiter.(pushWatcher)
	if !watch && !probe && !publish && !pushes {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	if watch {
		wg.Go(func() {
			for ctx.Err() == nil {
				err := pw.WatchPauses(ctx, func(key string, left time.Duration) { w.pauses.set(key, left, time.Now()) })
				if ctx.Err() == nil {
					w.logger.Warn("pause announcements: subscription ended; the limiter still decides pauses", "err", err)
					if !sleep(ctx, time.Second) {
						return
					}
				}
			}
		})
	}
	if pushes {
		wg.Go(func() {
			for ctx.Err() == nil {
				err := xw.WatchPushes(ctx, w.pushes.add)
				if ctx.Err() == nil {
					w.logger.Warn("push announcements: subscription ended; sends held for slots taken before a push go at them", "err", err)
					if !sleep(ctx, time.Second) {
						return
					}
				}
			}
		})
	}
	if publish {
		wg.Go(func() { w.publishMargins(ctx, mp) })
	}
	if probe {
		tick := w.probeTick
		if tick <= 0 {
			tick = probeTick
		}
		wg.Go(func() { w.probeLoop(ctx, pr, probed, tick) })
	}
	w.stop, w.done = cancel, make(chan struct{})
	go func() { wg.Wait(); close(w.done) }()
}

// Shutdown stops fetching tasks, waits up to ShutdownTimeout for in-flight
// sends, pushes the rest back to their queues, makes a last attempt (10s at
// most) to write the delivery records Redis refused, and returns.
func (w *Worker) Shutdown() {
	w.srv.Shutdown()
	w.pushMu.Lock()
	w.pushClosed = true
	w.pushMu.Unlock()
	w.pushing.Wait()
	if w.stop != nil {
		w.stop()
		<-w.done
	}
	w.unrecorded.close()
}

// Run processes tasks until ctx is done, then shuts down gracefully.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.Start(); err != nil {
		return err
	}
	<-ctx.Done()
	w.Shutdown()
	return nil
}

// Handler returns the throttled handler for ch: it decodes the task, renders
// ch's limit keys from the payload, consumes them in one atomic call, and
// sends only if every limit allowed. A blocked send returns a
// *ThrottledError, which the Worker's asynq configuration turns into a
// requeue after the exact wait without spending a retry. A provider
// throttle or a transient failure spends an attempt of ch.Retry: retried
// after the budget's wait, or archived with a *BudgetSpentError.
func (w *Worker) Handler(ch Channel) (asynq.Handler, error) {
	h, err := w.handler(ch)
	if err != nil {
		return nil, err
	}
	return asynq.HandlerFunc(h.serve), nil
}

func (w *Worker) handler(ch Channel) (*handler, error) {
	if ch.Name == "" || ch.TaskType == "" || ch.Prepare == nil {
		return nil, errors.New("channel needs Name, TaskType and Prepare")
	}
	if ch.ThrottleBackoff == 0 {
		ch.ThrottleBackoff = DefaultThrottleBackoff
	}
	if ch.PairBackoff == 0 {
		ch.PairBackoff = DefaultPairBackoff
	}
	if ch.MaxRetryAfter == 0 {
		ch.MaxRetryAfter = DefaultMaxRetryAfter
	}
	if ch.MaxPayloadBytes == 0 {
		ch.MaxPayloadBytes = tasks.MaxPayloadBytes(ch.TaskType)
	}
	ch.Queue = ch.queueName()
	if err := ch.checkGroups(); err != nil {
		return nil, err
	}
	ch.Headroom = ch.headroom()
	ch = ch.credentialTimes()
	if err := ch.checkWeights(); err != nil {
		return nil, err
	}
	if ch.Hold == 0 {
		ch.Hold = throttle.DefaultHold
	}
	fields, known := tasks.FieldNames(ch.TaskType) // nil for a type tasks does not know: any field
	if known {
		// A cost must be a whole-number field (SMS segments), not any field:
		// "to" would parse "+1202…" as a cost.
		costs := tasks.CostFieldNames(ch.TaskType)
		for i, r := range ch.Rules {
			if r.CostField != "" && !slices.Contains(costs, r.CostField) {
				return nil, fmt.Errorf("channel %s: rules[%d]: limit %q: cost %q is not a whole-number field of %s tasks (want one of: %s)",
					ch.Name, i, r.Limit.Name, r.CostField, ch.TaskType, strings.Join(costs, ", "))
			}
		}
	}
	set, err := rules.Compile(ch.Name, ch.SpreadBy, fields, ch.Rules)
	if err != nil {
		return nil, err
	}
	h := &handler{w: w, ch: ch, queues: ch.Queues(), rules: set, now: time.Now, margin: newMarginBook(ch.Headroom, ch.maxMargin())}
	if err := h.initBudget(fields); err != nil {
		return nil, err
	}
	if p, ok := w.opts.Limiter.(Pauser); ok {
		h.pauser = p
		if h.pauses, err = pauseScopes(ch, fields); err != nil {
			return nil, err
		}
	}
	if h.adapt, err = newAdaptBinding(ch, w.opts.Limiter, set, fields, h.pauses); err != nil {
		return nil, err
	}
	if h.deferral, err = newDeferBinding(ch, w.opts.Limiter, set, fields, h.pauses); err != nil {
		return nil, err
	}
	return h, nil
}

// exactTypes is mux middleware that archives a task whose type no channel
// handles, at once and with the reason: asynq would retry it MaxRetry times
// (ErrHandlerNotFound), and its prefix match would hand "whatsapp:sendx" to
// the whatsapp:send handler.
func (w *Worker) exactTypes(known map[string]string) asynq.MiddlewareFunc {
	types := make([]string, 0, len(known))
	for t := range known {
		types = append(types, t)
	}
	slices.Sort(types)
	list := strings.Join(types, ", ")
	return func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			if _, ok := known[t.Type()]; !ok && t.Type() != tasks.TypeBatch {
				w.opts.Metrics.outcome(unknownChannel, OutcomeUnknownType)
				return permanent(fmt.Errorf("unknown task type %.64q: no handler (this worker handles %s)", t.Type(), list))
			}
			return next.ProcessTask(ctx, t)
		})
	}
}

type handler struct {
	w      *Worker
	ch     Channel
	queues []string // ch.Queues()
	rules  *rules.Set
	clock  redisClock
	now    func() time.Time // time.Now; tests stand in a clock that jumps
	pauser Pauser           // nil: provider throttles pause nothing
	pauses []pauseScope
	// The retry budget (budget.go).
	failures firstFailures
	endpoint *rules.Template                // Channel.Endpoint compiled; nil: none
	jitter   func(n int64) int64            // [0, n): the schedule's jitter
	meta     func(context.Context) taskMeta // the task's ID and retry counts
	adapt    *adaptBinding                  // nil: no adaptive limits
	deferral *deferBinding                  // nil: pauses move no plans (deferplan.go)
	margin   *marginBook                    // the pacing margin (margin.go)
}

// pauseScope is a Channel.PauseScopes entry, its key compiled.
type pauseScope struct {
	scope string
	key   rules.Template
}

// pauseKey renders the pause key of scope for a send's fields; "" when
// the channel does not pause that scope or a field is empty.
func (h *handler) pauseKey(scope string, fields map[string]string) string {
	for _, p := range h.pauses {
		if p.scope == scope {
			k, _ := p.key.Render(fields)
			return k
		}
	}
	return ""
}

// channelOfQueue returns the name of the worker's channel whose queue is q,
// or "" when none is.
func (w *Worker) channelOfQueue(q string) string {
	for name, h := range w.handlers {
		if slices.Contains(h.queues, q) {
			return name
		}
	}
	return ""
}

// process makes one attempt at t; a records what serve needs besides the
// error (the decoded payload, the provider's answer).
func (h *handler) process(ctx context.Context, t *asynq.Task, a *attempt) error {
	m, name := h.w.opts.Metrics, h.ch.Name
	if q, ok := asynq.GetQueueName(ctx); ok && !slices.Contains(h.queues, q) && h.w.channelOfQueue(q) != "" {
		// A producer put the task in another channel's queue: it would run
		// under that queue's weight and pauses, and whoever reads the
		// queue expects that channel's sends. Not sent, not retried. A
		// queue no channel of this worker owns (asynq.Queue chosen by the
		// caller, Mux in another server) is the caller's choice.
		m.outcome(name, OutcomeWrongQueue)
		return permanent(fmt.Errorf("%s task in queue %.64q: %s tasks run only from the %s channel's queue %q; not sent", t.Type(), q, t.Type(), name, h.ch.Queue))
	}
	if n := len(t.Payload()); h.ch.MaxPayloadBytes > 0 && n > h.ch.MaxPayloadBytes {
		m.outcome(name, OutcomeMalformed)
		return permanent(fmt.Errorf("%s: payload is %d bytes, over the channel's cap of %d (channels.%s.max_payload_bytes)", t.Type(), n, h.ch.MaxPayloadBytes, name))
	}
	p, err := h.ch.Prepare(t.Payload())
	if err != nil {
		m.outcome(name, OutcomeMalformed)
		return permanent(fmt.Errorf("%s: malformed payload: %w", t.Type(), err))
	}
	a.p, a.prepared = p, true
	reqs := pauseRequests(h.rules.Requests(p.Fields), h.pauses, p.Fields)
	if res, ok := h.w.opts.Limiter.(Reserver); ok && throttle.Reservable(reqs) {
		leases, err := h.reserve(ctx, res, p, reqs, a)
		if err != nil {
			if len(leases) > 0 {
				h.release(ctx, leases) // shut down during the hold: the send never went
			}
			return err
		}
		if len(leases) > 0 {
			defer h.release(ctx, leases)
		}
	} else if len(reqs) > 0 {
		d, err := h.w.opts.Limiter.Consume(ctx, reqs...)
		m.call(name, "consume")
		if err != nil {
			m.outcome(name, OutcomeLimiterError)
			return fmt.Errorf("%s: limiter: %w", name, err)
		}
		if !d.Allowed {
			blk, _ := d.Blocking()
			m.outcome(name, OutcomeThrottled)
			m.throttled(name, d.BlockedBy, d.Wait.Seconds())
			return &ThrottledError{Channel: name, Limit: d.BlockedBy, Key: blk.Key, RetryAfter: d.RetryAfter, Wait: d.Wait}
		}
		if len(d.Leases) > 0 {
			defer h.release(ctx, d.Leases)
		}
	}
	reserved(ctx, false) // a batch's next send may start: this one goes now
	start := time.Now()
	dep, sendCtx := h.departing(ctx, start, a, p.Fields, reqs)
	resp, err := p.Send(sendCtx)
	left := dep.done(start)
	m.sent(name, time.Since(start).Seconds())
	if err == nil {
		a.resp, a.sent = resp, true
		h.adaptUp(ctx, reqs)
		h.margin.accepted(h.now(), h.pauseKey(channels.ScopeSender, p.Fields), h.pauseKey(channels.ScopePair, p.Fields))
		h.endPauseRuns(ctx, reqs, start)
		h.pullNext(ctx, reqs, p.Fields, a.slot)
		if resp.Incomplete {
			m.outcome(name, OutcomeUnconfirmed)
			id := taskID(ctx)
			h.w.logger.Warn("sent, unconfirmed: the provider accepted the request but its reply was cut off or had no message id; not retried, a retry would send twice",
				"task_id", id, "channel", name, "status", resp.Status, "provider_id", resp.ProviderID)
			return nil
		}
		m.outcome(name, OutcomeSent)
		return nil
	}
	var ce *channels.Error
	if !errors.As(err, &ce) {
		m.outcome(name, OutcomeTransient)
		return err // shutdown (context canceled) or an unexpected failure: retried
	}
	switch ce.Class {
	case channels.Throttled:
		key, wait := h.providerThrottled(ctx, ce, p.Fields, reqs, start, left)
		m.outcome(name, OutcomeProviderThrottle)
		m.throttled(name, ProviderLimit, wait.Seconds())
		return &ThrottledError{Channel: name, Limit: ProviderLimit, Key: key, RetryAfter: ce.RetryAfter, Wait: wait, Err: ce}
	case channels.Unauthorized:
		return h.unauthorized(ctx, ce, p.Fields)
	case channels.Permanent:
		m.outcome(name, OutcomePermanent)
		return permanent(ce)
	default:
		m.outcome(name, OutcomeTransient)
		return ce
	}
}

// providerThrottled applies the provider throttle ce to a send with
// fields and requests reqs, handed to its channel at start and on the wire
// at left (this host's clock; both zero when unknown, for a throttle
// reported later in a callback; the adaptive rate judges the send by start,
// the jitter verdict by left): it pauses the
// scope ce names (pause), counts it, and lowers the adaptive limits the
// scope concerns. It returns the pause key ("" when none was paused) and
// the wait: the time left of the pause, else ce.RetryAfter or the
// channel's backoff, within MaxRetryAfter.
func (h *handler) providerThrottled(ctx context.Context, ce *channels.Error, fields map[string]string, reqs []throttle.Request, start, left time.Time) (key string, wait time.Duration) {
	wait = ce.RetryAfter
	if wait <= 0 {
		wait = h.ch.ThrottleBackoff
		if ce.Scope == channels.ScopePair {
			wait = h.ch.PairBackoff
		}
	}
	if wait > h.ch.MaxRetryAfter {
		h.w.logger.Warn("provider asked for a wait over the channel's cap; waiting the cap",
			"channel", h.ch.Name, "code", ce.Code, "asked", ce.RetryAfter, "cap", h.ch.MaxRetryAfter)
		wait = h.ch.MaxRetryAfter
	}
	key = h.pauseKey(ce.Scope, fields)
	if key != "" {
		var until time.Time
		var inARow int
		wait, until, inARow = h.pause(ctx, key, ce, wait)
		if !until.IsZero() && wait <= throttle.MaxPlannedPause {
			// A probe first only in a run of pauses (a storm): after a
			// lone throttle the scope resumes at its pace at once.
			h.deferPlanned(ctx, ce.Scope, fields, reqs, until, inARow >= 2)
		}
	}
	code, scope := throttleLabels(h.ch, ce)
	h.w.opts.Metrics.providerThrottle(h.ch.Name, code, scope)
	// A throttle a callback reported (start unknown) has no departure to
	// judge: it lowers the rate, as the provider's later word on it.
	if ce.IsRate() && !left.IsZero() && h.margin.jitter(h.now(), left, h.jitterSpan(ce.Scope), h.jitterScope(ce.Scope, fields), !h.adapted(ctx, reqs)) {
		// A send left later than the margin allowed just before: the
		// spacing, not the rate, was short (margin.go).
		h.w.logger.Info("provider throttle after a late departure: the pacing margin widens, the rate stays",
			"channel", h.ch.Name, "code", ce.Code, "scope", ce.Scope, "margin", h.margin.margin(h.now()).Round(time.Millisecond/10))
		return key, wait
	}
	h.adaptDown(ctx, ce, fields, reqs, start)
	return key, wait
}

// pause pauses the scope a provider throttle named (key) in every worker,
// for wait or, when the throttle grows (ce.Growth) and repeats with no
// accepted send between (endPauseRuns), longer, up to ce.MaxWait within
// MaxRetryAfter; it returns the time left of the pause, the task's wait,
// its end on the limiter's clock (zero when it could not be written) and
// how many pauses in a row it makes (Paused.InARow).
// A scope already paused is only extended. The first pause of a scope is
// logged at WARN and raises provider.paused; every throttle raises
// provider.throttled (once a second per scope). If the pause cannot be
// written the task still waits wait.
func (h *handler) pause(ctx context.Context, key string, ce *channels.Error, wait time.Duration) (time.Duration, time.Time, int) {
	growth := ce.Growth
	if growth > 1 {
		// Exponential backoff with jitter (up to +20%, within the cap), so
		// scopes throttled together (the senders of one account) do not
		// all end their pauses at once.
		wait = min(wait+time.Duration(rand.Int64N(int64(wait)/5+1)), h.ch.MaxRetryAfter)
	}
	most := h.ch.MaxRetryAfter
	if ce.MaxWait > 0 {
		most = min(most, ce.MaxWait)
	}
	pz, err := h.pauser.Pause(ctx, key, throttle.PauseOptions{Wait: wait, Growth: growth, Max: most, Code: ce.Code, Reason: ce.Message})
	if err != nil {
		h.w.logger.Warn("pause scope after a provider throttle", "channel", h.ch.Name, "key", key, "code", ce.Code, "err", err)
		return wait, time.Time{}, 0
	}
	left := h.recordPause(ctx, key, pz, ce)
	if pz.New {
		h.w.logger.Warn("provider throttle: scope paused in every worker", "channel", h.ch.Name, "key", key,
			"code", ce.Code, "scope", ce.Scope, "for", left.Round(time.Millisecond), "until", pz.Until.UTC(), "in_a_row", pz.InARow, "reason", pz.Reason)
	} else {
		h.w.logger.Debug("provider throttle: scope already paused", "channel", h.ch.Name, "key", key, "code", ce.Code, "until", pz.Until.UTC())
	}
	return left, pz.Until, pz.InARow
}

// recordPause notes a pause set for the provider's answer ce in the
// worker's pause book and raises its events: provider.throttled for every
// answer (once a second per key), provider.paused when the scope was not
// paused before. It returns the time left of the pause.
func (h *handler) recordPause(ctx context.Context, key string, pz throttle.Paused, ce *channels.Error) time.Duration {
	left := pz.Until.Sub(pz.Since)
	h.w.pauses.set(key, left, h.now())
	fields := []any{"code", ce.Code, "reason", pz.Reason, "until", pz.Until.UnixMilli()}
	h.pauser.Emit(ctx, throttle.EventProviderThrottled, key, time.Second, fields...)
	if pz.New {
		h.pauser.Emit(ctx, throttle.EventProviderPaused, key, max(left, time.Millisecond), append(fields, "in_a_row", pz.InARow)...)
	}
	return left
}

// maxHoldRounds bounds how often one dequeue asks again after a hold: a
// send held back within the hold by a slow limit (a pair) asks once more at
// its instant; more rounds only happen under contention.
const maxHoldRounds = 3

// maxLate is how late a held send may wake up after its slot and still go
// in it. A later one would come closer than the interval to the send after
// it, eating the spacing that network jitter needs: on its sub-second
// limits it gives up that slot (a gap, never a crowd) and takes the next
// free one; on its slower ones (a 1/s sender, a pair) the next send is
// spaced from its real instant. On an idle host wake-ups that late are
// rare (the e2e run: 1 in 20,000 over 10ms); the measured margin (margin.go)
// covers what a busy host adds after the wake-up.
const maxLate = 5 * time.Millisecond

// retake gives a send that woke up late a new slot on its sub-second
// limits (the first free one, not a place behind the plan) and waits for
// it; on its slower GCRA limits (a pair, a 1/s sender) it keeps its slot
// and pushes the next send to one interval after its own instant, so its
// lateness cannot bring two sends closer than the limit (a 1/s sender's
// margin is only 1.5% of a second). It keeps window counts and leases. If
// no slot comes within the hold the send goes now, late: the headroom is
// there for that. The error is ctx's, when it ends during the wait.
//
// It sets a.slot to the instant the send now goes at (this host's
// clock): the new slot, or the retake's own instant on slow limits; and
// a.taken's retake time and the limits it gave new slots, from which
// those count the pushes after it (takenAt).
func (h *handler) retake(ctx context.Context, res Reserver, reqs []throttle.Request, a *attempt) error {
	paced := gcraLimits(reqs)
	if len(paced) == 0 {
		return nil
	}
	asked := h.now()
	r, err := res.Reserve(ctx, throttle.ReserveOptions{Priority: throttle.High, Retake: true, Hold: h.ch.Hold, Headroom: h.headroom(asked)}, paced...)
	h.w.opts.Metrics.call(h.ch.Name, "reserve")
	if err != nil || !r.Firm {
		return nil
	}
	// The limits the retake gave new slots (its fast ones) count pushes
	// from the retake on: a push made before it has moved those slots in
	// Redis already. The slow ones keep their slots and count them from
	// the first reservation: a push made between the two still moves them.
	a.taken.retaken, a.taken.retook = r.Now, map[limitID]bool{}
	for i, d := range r.Limits {
		if d.Retook && i < len(paced) {
			a.taken.retook[limitID{paced[i].Key, paced[i].Limit.Name}] = true
		}
	}
	a.slot = asked
	if at := h.clock.local(r.At); at.After(asked) {
		a.slot = at
	}
	if w := a.slot.Sub(h.now()); w > 0 && w <= h.ch.Hold && !sleep(ctx, w) {
		return ctx.Err()
	}
	return nil
}

// sleep waits d, or until ctx is done; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// gcraLimits returns the GCRA requests: the paced ones, whose spacing a
// late send would squeeze.
func gcraLimits(reqs []throttle.Request) []throttle.Request {
	var out []throttle.Request
	for _, r := range reqs {
		if r.Limit.Algorithm == throttle.GCRA {
			out = append(out, r)
		}
	}
	return out
}

// reserve takes the send's firm slot and holds the send until its instant,
// or returns a *ThrottledError that brings the task back for its planned
// slot. It returns the Concurrency leases the reservation took, and sets
// a.slot to the instant the send was given (this host's clock; zero for a
// prefetched slot), from which its departure's lateness is measured, and
// a.base, a.taken and a.headroom (see attempt).
func (h *handler) reserve(ctx context.Context, res Reserver, p Prepared, reqs []throttle.Request, a *attempt) ([]throttle.Lease, error) {
	slot := &a.slot
	m, name := h.w.opts.Metrics, h.ch.Name
	id := taskID(ctx)
	opts := throttle.ReserveOptions{TaskID: id, Priority: p.Priority, Hold: h.ch.Hold, Headroom: h.headroom(h.now()),
		Tenant: p.Tenant, Weight: h.ch.weight(p.Tenant)}
	for round := 1; ; round++ {
		sent := h.now()
		r, err := res.Reserve(ctx, opts, reqs...)
		if err == nil && (r.Firm || r.Local) {
			// (behind: its first ask was firm at once, the firm book had no
			// slot ahead of it; a prefetched slot says nothing of it)
			reserved(ctx, round == 1 && !r.Local && r.Delay() == 0)
		}
		if err != nil {
			m.call(name, "reserve")
			m.outcome(name, OutcomeLimiterError)
			return nil, fmt.Errorf("%s: limiter: %w", name, err)
		}
		if r.Local {
			// A slot an earlier call prefetched: firm now, no round trip,
			// unless a pause this worker knows of came since.
			*slot, a.base, a.taken = time.Time{}, time.Time{}, takenAt{}
			// (Leases: a spread send's other scope's, taken beside.)
			return r.Leases, h.pausedMeanwhile(reqs, time.Time{})
		}
		m.call(name, "reserve")
		// (a call that waited in the limiter's batcher for company, up to
		// half its pace, reads as a longer round trip whose midpoint is
		// off by up to half that wait; the clock keeps the shortest round
		// trip of its window, one that did not wait: a lone call or the
		// one that found the batcher due)
		h.clock.observe(sent, h.now(), r.Now)
		// The instant is on the limiter's clock (Redis TIME): hold until
		// this host's clock reads it (redisClock), so neither clock skew
		// nor the reply's latency moves the send.
		delay := r.Delay()
		if r.Firm || (delay <= h.ch.Hold && round < maxHoldRounds && r.Planned) {
			*slot, a.taken, a.headroom = h.clock.local(r.At), takenAt{first: r.Now}, opts.Headroom
			if wait := slot.Sub(h.now()); wait > 0 && delay > 0 {
				if wait > delay+h.ch.Hold {
					wait = delay // the clock mapping jumped: trust the reply
				}
				deadline := h.now().Add(wait)
				*slot = deadline
				if !sleep(ctx, wait) {
					m.outcome(name, OutcomeTransient)
					return r.Leases, ctx.Err() // shutdown: asynq puts the task back
				}
				late := h.now().Sub(deadline)
				m.woke(name, late.Seconds())
				if late > maxLate && r.Firm && round < maxHoldRounds {
					if err := h.retake(ctx, res, reqs, a); err != nil {
						m.outcome(name, OutcomeTransient)
						return r.Leases, err
					}
				}
			}
			if r.Firm {
				a.base = *slot
				if err := h.heldForPushes(ctx, reqs, a.taken, slot); err != nil {
					m.outcome(name, OutcomeTransient)
					return r.Leases, err // shutdown: asynq puts the task back
				}
				m.held(name, delay.Seconds())
				// A scope paused since the slot was taken (a provider
				// throttle, in any worker): the slot goes unused, even if
				// the pause has ended, as it was paced at the rate of
				// before the throttle (an adaptive limit lowers it). Asked
				// again, the limiter plans the send past the pause (it
				// comes back once, at a place of its own, not with every
				// send held when the pause was set) or, the pause over,
				// gives it a slot at the rate of now.
				// Only past a pause the limiter plans past (MaxPlannedPause):
				// a longer one's waiting sends must name it, so that a
				// resume or a probe finds them (RunWaiting). Once: a pause
				// this worker still holds after it ended in Redis would
				// otherwise take and drop a slot each round. (One attempt,
				// one outcome: the one of the answer.)
				if key, until := h.w.pauses.blocked(reqs, h.now(), sent); key != "" && until.Sub(h.now()) <= throttle.MaxPlannedPause &&
					len(r.Leases) == 0 && p.Priority != throttle.High && round == 1 {
					continue
				}
				return r.Leases, h.pausedMeanwhile(reqs, sent)
			}
			continue // held back by a slower limit: ask again at the instant
		}
		blk, _ := r.Blocking()
		te := &ThrottledError{Channel: name, Limit: r.BlockedBy, Key: blk.Key, RetryAfter: r.RetryAfter, Wait: delay, Planned: r.Planned}
		if r.Planned {
			// The slot's whole second is on the limiter's clock: a wait
			// measured from a later local now would push a slot late in its
			// second into the next one. asynq releases at local whole
			// seconds, so come back at the one nearest its start.
			te.Due = h.clock.local(r.At.Truncate(time.Second)).Round(time.Second)
			if r.BlockedBy == throttle.PauseName && te.Due.Before(h.clock.local(r.At)) {
				// Planned for a pause's end: never back while it lasts.
				te.Due = te.Due.Add(time.Second)
			}
			m.outcome(name, OutcomePlanned)
		} else {
			m.outcome(name, OutcomeThrottled)
		}
		m.throttled(name, r.BlockedBy, delay.Seconds())
		return nil, te
	}
}

// pausedMeanwhile returns the *ThrottledError of a send whose firm slot
// was taken (at taken; zero: only a pause now counts) before one of its
// scopes was paused (the worker's pause book), or nil: the send goes. A
// pause that has ended brings the task back at once, to take a slot at
// the rate of now.
func (h *handler) pausedMeanwhile(reqs []throttle.Request, taken time.Time) error {
	key, until := h.w.pauses.blocked(reqs, h.now(), taken)
	if key == "" {
		return nil
	}
	wait := max(0, until.Sub(h.now()))
	h.w.opts.Metrics.outcome(h.ch.Name, OutcomeThrottled)
	h.w.opts.Metrics.throttled(h.ch.Name, throttle.PauseName, wait.Seconds())
	return &ThrottledError{Channel: h.ch.Name, Limit: throttle.PauseName, Key: key, RetryAfter: wait, Wait: wait}
}

func (h *handler) release(ctx context.Context, leases []throttle.Lease) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	h.w.opts.Metrics.call(h.ch.Name, "release")
	if err := h.w.opts.Limiter.Release(ctx, leases); err != nil {
		// The lease expires on its own; the slot is only held longer.
		h.w.logger.Warn("release concurrency lease", "channel", h.ch.Name, "err", err)
	}
}

func (w *Worker) logError(ctx context.Context, t *asynq.Task, err error) {
	id := taskID(ctx)
	var te *ThrottledError
	var be *BudgetSpentError
	switch {
	case errors.As(err, &be):
		w.logger.Warn("retry budget spent; archived", "task_id", id, "channel", be.Channel, "attempts", be.Attempts,
			"age", formatAge(be.Age), "why", be.Why, "endpoint", be.Endpoint, "last", be.Err.Error())
	case errors.As(err, &te):
		w.logger.Debug("throttled", "task_id", id, "channel", te.Channel, "limit", te.Limit, "key", te.Key, "wait", te.Wait)
	case errors.Is(err, asynq.SkipRetry):
		w.logger.Warn("archived", "task_id", id, "type", t.Type(), "reason", err.Error())
	default:
		w.logger.Warn("send failed, will retry", "task_id", id, "type", t.Type(), "retried", asynqMeta(ctx).retried, "err", err)
	}
}

// asynqLogger routes asynq's own logs into slog.
type asynqLogger struct{ l *slog.Logger }

func (a asynqLogger) Debug(args ...any) { a.l.Debug(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Info(args ...any)  { a.l.Info(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Warn(args ...any)  { a.l.Warn(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Error(args ...any) { a.l.Error(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Fatal(args ...any) { a.l.Error(fmt.Sprint(args...), "component", "asynq") }

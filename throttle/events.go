package throttle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Event types in the events stream.
const (
	// EventExceeded: a Consume was blocked by the limit on Key (at most
	// once per key and window), or a Reserve could not take a send now
	// because of it (the blocked limit with the longest wait, at most once
	// per key per max(window, ExceededEvery); a send planned within the
	// hold writes none). Fields: key, name, limit (capacity), window,
	// reset (Unix ms).
	EventExceeded = "limits.exceeded"
	// EventWarning: a Consume left fewer than the threshold units on Key.
	// Fields: key, name, remaining, threshold, limit.
	EventWarning = "limits.warning"
	// EventProviderThrottled: a provider answered a send with a throttle
	// (WhatsApp 130429, Twilio 20429...). Fields: key (the scope's pause
	// key), code, reason, until (Unix ms, the pause's end). At most one per
	// key a second.
	EventProviderThrottled = "provider.throttled"
	// EventProviderPaused: a scope was paused (it was not before). Fields
	// as EventProviderThrottled, plus in_a_row.
	EventProviderPaused = "provider.paused"
	// EventOperatorPaused: an operator paused a channel (`sluice channels
	// pause`). Fields: key (the channel's pause key), reason, until (Unix
	// ms; absent for a pause until resumed). One per pause.
	EventOperatorPaused = "operator.paused"
	// EventProviderResumed: a paused scope was resumed before its end (an
	// operator, `sluice channels resume`, or a credential probe that
	// succeeded: worker.Channel.Probe). Fields: key; from a probe also
	// code (the refusal's) and reason.
	EventProviderResumed = "provider.resumed"
	// EventEndpointFailing: a webhook or HTTP call task spent its retry
	// budget (worker.RetryBudget) and was archived: its endpoint has been
	// failing for the whole budget. Fields: key (the endpoint,
	// "webhook:endpoint:<host>"), code (the last answer's provider code or
	// HTTP status, 0 for a network error), reason (the archive reason,
	// "budget spent: 8 attempts over 1d3h35m5s, ...", at most 500 bytes),
	// task_id, attempts, age_ms (first to last failed attempt). At most one
	// per key a minute.
	EventEndpointFailing = "endpoint.failing"
	// EventLimitsAdapted: an adaptive limit's effective rate changed
	// (AdaptDown, AdaptUp). Fields: key, name (the limit), configured,
	// effective, previous and ceiling (rates, "0.9375/s"; ceiling only
	// when one is known), reason (throttled, quiet, recovered, expired, or
	// the provider's message), code (the provider's, for a decrease). One
	// per change.
	EventLimitsAdapted = "limits.adapted"
	// EventDeliveryFailed: a provider's status callback reported a send
	// failed or undelivered (internal/callbacks). Fields: key
	// ("<channel>:message:<provider id>"), status, code (the provider's, 0
	// for none), reason (its title), task_id ("" when the send is not
	// recorded yet). At most one per message a minute.
	EventDeliveryFailed = "delivery.failed"
)

// EventTypes is every type the events stream holds: the one table that the
// writers (Emit refuses any other type) and the readers (`sluice events
// tail --type`) share.
var EventTypes = []string{
	EventExceeded, EventWarning, EventLimitsAdapted,
	EventProviderThrottled, EventProviderPaused, EventOperatorPaused, EventProviderResumed,
	EventEndpointFailing, EventDeliveryFailed,
}

// IsEventType reports whether typ is one of EventTypes.
func IsEventType(typ string) bool { return slices.Contains(EventTypes, typ) }

// EventOptions configures the events stream of a Redis limiter. Events are
// best-effort: an event that cannot be written is dropped, never failing the
// decision.
type EventOptions struct {
	// Disabled turns events off.
	Disabled bool
	// MaxLen caps the stream (XADD MAXLEN ~). Zero means 10000.
	MaxLen int64
	// WarnAt is the share of a limit's capacity below which remaining units
	// raise a limits.warning. Zero means 0.1 (10%); negative disables warnings.
	WarnAt float64
}

// Event is one entry of the events stream.
type Event struct {
	ID        string        `json:"id"` // stream entry id
	Type      string        `json:"type"`
	Key       string        `json:"key"`
	Name      string        `json:"name"`  // the limit's name
	Limit     int64         `json:"limit"` // its capacity
	Window    time.Duration `json:"-"`
	Reset     time.Time     `json:"-"`
	Remaining int64         `json:"remaining,omitempty"`
	Threshold int64         `json:"threshold,omitempty"`
	// Code, Reason, Until and InARow are the provider.* events' (a pause).
	Code   int64     `json:"code,omitempty"`
	Reason string    `json:"reason,omitempty"`
	Until  time.Time `json:"-"`
	InARow int64     `json:"in_a_row,omitempty"`
	// Configured, Effective, Previous and Ceiling are limits.adapted's
	// rates, as written ("0.9375/s").
	Configured string    `json:"configured,omitempty"`
	Effective  string    `json:"effective,omitempty"`
	Previous   string    `json:"previous,omitempty"`
	Ceiling    string    `json:"ceiling,omitempty"`
	At         time.Time `json:"-"`
}

var eventsScript = redis.NewScript(joinLua("events.lua"))

// eventSink turns decisions into events, once per key, type and window:
// first checked in a bounded in-process map, then across processes by the
// marker in events.lua.
type eventSink struct {
	l    *Redis
	opts EventOptions
	mu   sync.Mutex
	sent map[string]struct{} // "type:key:window end" already emitted
}

const maxEventMarks = 10000

func newEventSink(l *Redis, opts EventOptions) *eventSink {
	if opts.MaxLen <= 0 {
		opts.MaxLen = 10000
	}
	if opts.WarnAt == 0 {
		opts.WarnAt = 0.1
	}
	return &eventSink{l: l, opts: opts, sent: map[string]struct{}{}}
}

// threshold is the remaining-units level below which a warning is raised.
func (s *eventSink) threshold(capacity int64) int64 {
	if s.opts.WarnAt < 0 {
		return 0
	}
	return int64(float64(capacity) * s.opts.WarnAt)
}

func (s *eventSink) observe(ctx context.Context, reqs []Request, d Decision) {
	if s == nil || s.opts.Disabled {
		return
	}
	for i, ld := range d.Limits {
		lim := reqs[i].Limit
		switch {
		case !ld.Allowed:
			s.emit(ctx, EventExceeded, ld.Key, lim.Window(), d.Now,
				"key", ld.Key, "name", ld.Name, "limit", ld.Limit, "window", formatWindow(lim.Window()), "reset", unixMilli(ld.Reset))
		case d.Allowed && ld.Taken > 0:
			th := s.threshold(ld.Limit)
			if th > 0 && ld.Remaining < th && ld.Remaining+ld.Taken >= th {
				s.emit(ctx, EventWarning, ld.Key, lim.Window(), d.Now,
					"key", ld.Key, "name", ld.Name, "remaining", ld.Remaining, "threshold", th, "limit", ld.Limit)
			}
		}
	}
}

// ExceededEvery is the shortest span in which a limit that holds back
// Reserve's sends writes limits.exceeded again for one key: a backlog that
// comes back once per send writes one event a minute per key (one a window
// for windows longer than a minute: a daily cap writes one a day per key),
// not one per send.
const ExceededEvery = time.Minute

// observeBlocked writes limits.exceeded for the limit that held back a
// reservation that is not firm: the blocked limit with the longest wait (a
// Pause is not a limit; provider.* events report it). A send planned within
// hold goes within it and writes nothing. At most once per key per
// max(window, ExceededEvery).
func (s *eventSink) observeBlocked(ctx context.Context, reqs []Request, r Reservation, hold time.Duration) {
	if s == nil || s.opts.Disabled || r.Firm || (r.Planned && r.Delay() <= hold) {
		return
	}
	best := -1
	for i, ld := range r.Limits {
		if ld.Allowed || i >= len(reqs) || reqs[i].Limit.Algorithm == Pause {
			continue
		}
		if b := best; b < 0 || ld.Wait > r.Limits[b].Wait || (ld.Wait == r.Limits[b].Wait && ld.RetryAfter > r.Limits[b].RetryAfter) {
			best = i
		}
	}
	if best < 0 {
		return
	}
	ld, lim := r.Limits[best], reqs[best].Limit
	s.emit(ctx, EventExceeded, ld.Key, max(lim.Window(), ExceededEvery), r.Now,
		"key", ld.Key, "name", ld.Name, "limit", ld.Limit, "window", formatWindow(lim.Window()), "reset", unixMilli(ld.Reset))
}

// observePlanned writes limits.exceeded for sends that one Plan call put
// more than hold ahead: for the limit key most of the scope's first batch
// shares (the sender's, where a campaign's backlog builds; a pair key holds
// one send of it). It has no reset: a campaign enqueued in batches (sluice
// send: 256 rows a call) ends beyond any one call's plan, and its end is
// the enqueue's answer and /limits/'s "drains". At most once per key per
// max(window, ExceededEvery), as observeBlocked, and one check per scope per
// call.
func (s *eventSink) observePlanned(ctx context.Context, reqs []Request, now, last time.Time, hold time.Duration) {
	if s == nil || s.opts.Disabled || last.Sub(now) <= hold || len(reqs) == 0 {
		return
	}
	count := make(map[string]int, 4)
	best := -1
	for i, r := range reqs {
		if r.Limit.Algorithm == Pause {
			continue // not a limit; provider.* events report it
		}
		count[r.Key]++
		if best < 0 || count[r.Key] > count[reqs[best].Key] {
			best = i
		}
	}
	if best < 0 {
		return
	}
	lim := reqs[best].Limit
	s.emit(ctx, EventExceeded, reqs[best].Key, max(lim.Window(), ExceededEvery), now,
		"key", reqs[best].Key, "name", lim.Name, "limit", lim.Capacity(), "window", formatWindow(lim.Window()))
}

// emit writes an event unless this key already had one of its type in the
// current window. Events repeat at most once per aligned window of the limit
// (for a fixed window exactly its window), so the marker names the window's
// end. A failed write is dropped (events are best-effort) and logged.
func (s *eventSink) emit(ctx context.Context, typ, key string, window time.Duration, now time.Time, fields ...any) {
	w := max(window, time.Millisecond).Microseconds()
	until := time.UnixMicro((now.UnixMicro()/w + 1) * w)
	mark := typ + ":" + key + ":" + strconv.FormatInt(until.UnixMilli(), 10)
	s.mu.Lock()
	if _, ok := s.sent[mark]; ok {
		s.mu.Unlock()
		return
	}
	if len(s.sent) >= maxEventMarks {
		clear(s.sent) // bounded: forgetting marks only costs a round trip each
	}
	s.sent[mark] = struct{}{}
	s.mu.Unlock()
	ttl := max(until.Sub(now).Milliseconds(), 1)
	args := append([]any{ttl, s.opts.MaxLen, "type", typ, "at", now.UnixMilli()}, fields...)
	keys := []string{s.l.StreamKey(), s.l.eventMarkKey(mark)}
	// A nil reply (redis.Nil) is another process's marker: the event is
	// already in the stream for this window.
	if err := eventsScript.Run(context.WithoutCancel(ctx), s.l.rdb, keys, args...).Err(); err != nil && !errors.Is(err, redis.Nil) {
		s.l.warn.eventWrite.warn(ctx, s.l.logger(), "throttle: event dropped", "type", typ, "key", key, "err", err)
	}
}

// Emit writes an event of typ (one of EventTypes) for key at most once per
// key and type in each aligned span of once (at least 1ms); fields are
// name/value pairs. Events are best-effort: a failed write is logged, never
// returned; a typ not in EventTypes is not written (logged at WARN), so
// every type in the stream is one a reader accepts.
func (l *Redis) Emit(ctx context.Context, typ, key string, once time.Duration, fields ...any) {
	if l.events == nil || l.events.opts.Disabled {
		return
	}
	if !IsEventType(typ) {
		l.warn.eventWrite.warn(ctx, l.logger(), "throttle: event of an unknown type dropped (not in throttle.EventTypes)", "type", typ, "key", key)
		return
	}
	l.events.emit(ctx, typ, key, once, l.localNow(), append([]any{"key", key}, fields...)...)
}

// formatWindow renders a window with its count, "1s", "1m", "1d", where
// FormatPeriod writes the bare unit of a rate ("80/s").
func formatWindow(d time.Duration) string {
	s := FormatPeriod(d)
	if s != "" && (s[0] < '0' || s[0] > '9') {
		return "1" + s
	}
	return s
}

// Events reads up to count events after the entry id after ("0" from the
// start, "$" only new ones), waiting up to block for one to arrive (0 does
// not wait). It returns the events and the id to pass next.
func (l *Redis) Events(ctx context.Context, after string, count int64, block time.Duration) ([]Event, string, error) {
	if block <= 0 {
		block = -1 // go-redis: no BLOCK argument
	}
	res, err := l.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{l.StreamKey(), after}, Count: count, Block: block}).Result()
	if err == redis.Nil {
		return nil, after, nil
	}
	if err != nil {
		return nil, after, fmt.Errorf("throttle: read events: %w", err)
	}
	var out []Event
	for _, st := range res {
		for _, m := range st.Messages {
			out = append(out, parseEvent(m))
			after = m.ID
		}
	}
	return out, after, nil
}

func parseEvent(m redis.XMessage) Event {
	str := func(k string) string { s, _ := m.Values[k].(string); return s }
	num := func(k string) int64 { n, _ := strconv.ParseInt(str(k), 10, 64); return n }
	e := Event{ID: m.ID, Type: str("type"), Key: str("key"), Name: str("name"), Limit: num("limit"),
		Remaining: num("remaining"), Threshold: num("threshold")}
	if w, err := ParsePeriod(str("window")); err == nil {
		e.Window = w
	}
	if r := num("reset"); r > 0 {
		e.Reset = time.UnixMilli(r)
	}
	e.Code, e.Reason, e.InARow = num("code"), str("reason"), num("in_a_row")
	e.Configured, e.Effective, e.Previous, e.Ceiling = str("configured"), str("effective"), str("previous"), str("ceiling")
	if u := num("until"); u > 0 {
		e.Until = time.UnixMilli(u)
	}
	e.At = time.UnixMilli(num("at"))
	return e
}

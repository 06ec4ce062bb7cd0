package worker

import (
	"context"
	"fmt"
	"math"
	"net/http/httptrace"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/throttle"
)

// The pacing margin. A strict provider counts its cap over any 1-second
// span of the arrival times it sees. Sends paced at intervals T leave at
// their slots plus a lateness L (the host did not run the sending goroutine
// at once, the HTTP client took a while), so the span from one send to the
// one a cap after it is cap·T + L(later) − L(earlier), and the provider
// counts cap+1 in a second when cap·T − 1s < L(earlier) − L(later). With
// the channel's headroom h, cap·T = 1s/(1−h): the spacing absorbs a
// lateness of up to M = h/(1−h) seconds, the margin (1.5% is 15.2ms). On a
// busy host, sends leave later than that.
//
// So each channel measures how late its sends leave, relative to their
// slots on this host's clock, and keeps the margin wide enough for it:
//
//	margin = min(MaxMargin, max(configured, measured, feedback))
//
// measured is a high quantile (lateQuantile) of the departures of the last
// two windows of marginWindow; feedback is what provider throttles that
// followed a late departure taught (jitter, not a wrong limit), decaying
// by half every marginDecay. Reservations are paced at the headroom of the
// margin, h = M/(1s+M).

// DefaultMaxMargin is Channel.MaxMargin's default: the widest a measured
// margin may make the channel's spacing, 50ms (4.8% of a second). A host
// whose sends leave later than that keeps drawing throttles; a wider
// margin would cost more than a tenth of the cap of every limit.
const DefaultMaxMargin = 50 * time.Millisecond

const (
	// marginWindow is how long one window of departures is kept; the
	// margin reads the current and the previous one, so it follows a host
	// that becomes idle within two windows.
	marginWindow = 10 * time.Second
	// lateQuantile is the share of departures the measured margin covers.
	lateQuantile = 0.999
	// marginDecay halves the feedback margin.
	marginDecay = time.Minute
	// marginMinSamples is how many departures a window needs before its
	// quantile counts: a few sends say nothing about the host.
	marginMinSamples = 50
	// lateBucket is the histogram's resolution; lateBuckets of them span
	// 0 to 256ms, the last one holding everything later.
	lateBucket  = time.Millisecond
	lateBuckets = 256
)

// lateWindow is a histogram of departure lateness.
type lateWindow struct {
	n      int
	counts [lateBuckets]uint32
}

func (w *lateWindow) add(late time.Duration) {
	i := int(late / lateBucket)
	if i < 0 {
		i = 0
	}
	if i >= lateBuckets {
		i = lateBuckets - 1
	}
	w.counts[i]++
	w.n++
}

// marginBook keeps one channel's margin. Safe for concurrent use.
type marginBook struct {
	base, most time.Duration

	mu       sync.Mutex
	cur      lateWindow
	prev     lateWindow
	curStart time.Time
	feedback time.Duration // from jitter throttles, at feedbackAt
	feedAt   time.Time
	feedSeq  uint64 // counts the widenings of feedback
	// marks holds, by scope key (a sender's or a pair's pause key), what
	// a throttle of the scope is judged by; sweptAt is when markLocked
	// last looked for idle marks to drop.
	marks   map[string]*scopeMark
	sweptAt time.Time
}

// scopeMark is one scope's record: its last departure later than the
// margin then in force (lateAt, by lateBy), and since when its sends have
// gone through with no throttle (okSince; zero: none since the last
// throttle), the last at lastOK.
type scopeMark struct {
	lateAt, okSince, lastOK time.Time
	lateBy                  time.Duration
	// judged: a throttle of the scope was judged already (its first one
	// may be unseen jitter however soon it came).
	judged bool
	// widened is the feedback's widening (marginBook.feedSeq) that the
	// scope's last jitter verdicts made (0: none), and prevFeed, prevAt
	// the feedback from before them: a throttle of the scope judged the
	// rate's gives it back (jitter).
	widened  uint64
	prevAt   time.Time
	prevFeed time.Duration
}

// maxScopeMarks bounds marginBook.marks; past it, the marks of scopes
// idle for a minute are dropped, looked for at most once a markSweepEvery:
// a campaign to many recipients keeps the book full of pairs that sent
// within the minute, and walking 4,096 marks for every new pair was 6% of
// a busy worker's CPU (a profile of issue 22's bench).
const (
	maxScopeMarks  = 4096
	markSweepEvery = time.Second
)

// heldFor is how long a scope's sends must have gone through, with no
// throttle, for a throttle with no late send to be judged unseen jitter:
// adaptive limits' quiet period (throttle.DefaultAdaptQuiet).
const heldFor = 3 * time.Second

// markLocked returns k's mark, made if needed; nil when the book is full.
func (b *marginBook) markLocked(now time.Time, k string) *scopeMark {
	if m := b.marks[k]; m != nil {
		return m
	}
	if b.marks == nil {
		b.marks = map[string]*scopeMark{}
	}
	if len(b.marks) >= maxScopeMarks {
		if since := now.Sub(b.sweptAt); since < markSweepEvery && since >= 0 {
			return nil
		}
		b.sweptAt = now
		for key, m := range b.marks {
			if now.Sub(m.lateAt) > time.Minute && now.Sub(m.lastOK) > time.Minute {
				delete(b.marks, key)
			}
		}
		if len(b.marks) >= maxScopeMarks {
			return nil
		}
	}
	m := &scopeMark{}
	b.marks[k] = m
	return m
}

// accepted records that a send of the scopes keys went through at now.
func (b *marginBook) accepted(now time.Time, keys ...string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, k := range keys {
		if k == "" {
			continue
		}
		if m := b.markLocked(now, k); m != nil {
			if m.okSince.IsZero() {
				m.okSince = now
			}
			m.lastOK = now
		}
	}
}

// newMarginBook returns the margin of a channel paced at headroom h (a
// fraction, >= 0) and bounded by most.
func newMarginBook(h float64, most time.Duration) *marginBook {
	base := headroomMargin(h)
	return &marginBook{base: base, most: max(most, base)}
}

// headroomMargin is the lateness a headroom h absorbs in a 1-second span:
// h/(1−h) seconds.
func headroomMargin(h float64) time.Duration {
	if h <= 0 {
		return 0
	}
	if h >= 1 {
		h = 0.99
	}
	return time.Duration(h / (1 - h) * float64(time.Second))
}

// marginHeadroom is the headroom that absorbs a lateness of m: m/(1s+m).
func marginHeadroom(m time.Duration) float64 {
	if m <= 0 {
		return 0
	}
	return m.Seconds() / (1 + m.Seconds())
}

// observe records a departure late by late (negative: early, counted as
// on time) at now, this host's clock, of a send of the scopes keys: in the
// histogram, and as the scopes' late departure when it is later than the
// margin in force.
func (b *marginBook) observe(now time.Time, late time.Duration, keys ...string) {
	b.record(now, late, true, keys)
}

// lateAtHandoff marks the scopes keys with a send already late by late at
// its handoff, at now, without counting it in the histogram (observe does
// once it has left): a throttle judged while the send is on its way sees
// it.
func (b *marginBook) lateAtHandoff(now time.Time, late time.Duration, keys ...string) {
	b.record(now, late, false, keys)
}

func (b *marginBook) record(now time.Time, late time.Duration, count bool, keys []string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	in := b.marginLocked(now)
	if count {
		b.cur.add(late)
	}
	if late <= in {
		return
	}
	for _, k := range keys {
		if k == "" {
			continue
		}
		m := b.markLocked(now, k)
		switch {
		case m == nil:
		case m.lateAt.After(now):
			// A departure recorded once its answer came, after a later
			// send's handoff marked the scope: the mark keeps its instant
			// and takes the larger lateness.
			m.lateBy = max(m.lateBy, late)
		default:
			m.lateAt, m.lateBy = now, late
		}
	}
}

// rollLocked starts a new window when the current one is over.
func (b *marginBook) rollLocked(now time.Time) {
	age := now.Sub(b.curStart)
	if age < marginWindow && !b.curStart.IsZero() {
		return
	}
	b.prev = b.cur
	if age >= 2*marginWindow {
		b.prev = lateWindow{} // idle for a window: nothing to go on
	}
	b.cur, b.curStart = lateWindow{}, now
}

// quantile is the q-quantile of the departures of a and b, rounded up to
// the bucket's end; 0 with too few departures.
func quantile(a, b *lateWindow, q float64) time.Duration {
	n := a.n + b.n
	if n < marginMinSamples {
		return 0
	}
	over := int(float64(n)*(1-q)) + 1 // departures at or past the quantile
	seen := 0
	for i := lateBuckets - 1; i >= 0; i-- {
		seen += int(a.counts[i]) + int(b.counts[i])
		if seen >= over {
			return time.Duration(i+1) * lateBucket
		}
	}
	return 0
}

// margin returns the margin in force at now.
func (b *marginBook) margin(now time.Time) time.Duration {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.marginLocked(now)
}

func (b *marginBook) marginLocked(now time.Time) time.Duration {
	b.rollLocked(now)
	m := max(b.base, quantile(&b.cur, &b.prev, lateQuantile), b.feedbackLocked(now))
	return min(m, b.most)
}

func (b *marginBook) feedbackLocked(now time.Time) time.Duration {
	if b.feedback <= 0 {
		return 0
	}
	halves := now.Sub(b.feedAt) / marginDecay
	if halves >= 16 {
		return 0
	}
	return b.feedback >> uint(max(halves, 0))
}

// headroom returns the headroom the channel's sends are paced at now: the
// margin's, at least the configured one.
func (h *handler) headroom(now time.Time) float64 {
	if h.margin == nil {
		return h.ch.Headroom
	}
	m := marginHeadroom(h.margin.margin(now))
	if m <= h.ch.Headroom {
		return h.ch.Headroom
	}
	// In steps of 0.1%, rounded up: reservations are coalesced into one
	// script call only when their headroom is the same.
	return math.Ceil(m*1000) / 1000
}

// jitter judges a provider throttle, of scope key, of a send that started
// at start (this host's clock; zero when unknown) and reports whether it
// was jitter, while the margin can still widen:
//   - seen: a send of the same scope left later than the margin then in
//     force within span before it (the provider's counting span: 1s, a
//     pair's 6s), or the send itself did. The margin widens to cover that
//     lateness and a quarter more (at least 5ms more than before);
//   - unseen: no send was late, but the scope's sends had gone through at
//     this pace for heldFor with no throttle, or it is the scope's first
//     throttle in this worker: a rate that held does not turn wrong in a
//     moment, the send was delayed where the worker cannot see (after it
//     left, in the provider's queue). The margin widens by half (at least
//     5ms). The next throttle needs another heldFor.
//
// unseen is false where the scope's rate is being searched for (an adapted
// limit): a probe above the provider's rate also fails after a quiet
// period.
//
// A jitter throttle says nothing about the limit's rate. A scope throttled
// again soon after its first throttle (a limit set above the provider's
// rate throttles again at once), or twice within heldFor, is not jitter:
// the rate must come down, and, if no late departure was seen, the margin
// that the scope's verdicts before it added is given back (unless another
// scope's has widened it since).
// With the margin at its bound, only the unseen case is jitter.
func (b *marginBook) jitter(now, start time.Time, span time.Duration, key string, unseen bool) bool {
	if b == nil || key == "" {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	in := b.marginLocked(now)
	m := b.markLocked(now, key) // a throttle on a scope's very first send is its first
	if m == nil {
		return false // the book is full: the rate decides
	}
	if start.IsZero() {
		start = now
	}
	held := !m.okSince.IsZero() && start.Sub(m.okSince) >= heldFor && unseen
	first := !m.judged && unseen
	m.okSince = time.Time{} // a throttle ends the scope's run of sends through
	m.judged = true
	seen := !m.lateAt.Before(start.Add(-span-in)) && !m.lateAt.After(start.Add(time.Second))
	var want time.Duration
	switch {
	case seen && in < b.most:
		want = max(m.lateBy+m.lateBy/4, in+5*time.Millisecond)
	case held || first:
		// Also at the bound: a rate that held is not cut for one
		// throttle; one that does not hold again is (the next throttle).
		// Nor is a scope's first throttle, even in its first seconds,
		// when a busy host's sends are late where the worker cannot see
		// (after they left): the configured rate is the provider's
		// documented one, and one throttle more is cheaper than a rate
		// cut to a quarter for the minute it takes to climb back.
		want = max(in+in/2, in+5*time.Millisecond)
	default:
		// The rate, not jitter: the verdict before, if it widened the
		// margin and nothing widened it since, was wrong (a limit set
		// above the provider's rate draws a throttle at once, which
		// counts as each worker's first). Its margin is given back, or
		// the search for the rate (docs/adaptive.md) would pace its
		// probes wider than the margin a host that is not late needs,
		// find a rate above the provider's to hold, and draw its
		// throttles a minute later, once the feedback has decayed.
		// Not when a late departure was seen: at the bound, the margin is
		// too narrow for this host, not too wide.
		if !seen && m.widened != 0 && m.widened == b.feedSeq {
			b.feedback, b.feedAt = m.prevFeed, m.prevAt
		}
		m.widened = 0
		return false
	}
	want = min(want, b.most)
	if want > b.feedbackLocked(now) {
		if m.widened == 0 || m.widened != b.feedSeq {
			m.prevFeed, m.prevAt = b.feedback, b.feedAt // before the scope's run of verdicts
		}
		b.feedSeq++
		m.widened = b.feedSeq
		b.feedback, b.feedAt = want, now
	}
	return true
}

// snapshot returns the margin's parts at now, for metrics and /limits/.
func (b *marginBook) snapshot(now time.Time) MarginSnapshot {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.marginLocked(now)
	return MarginSnapshot{
		Margin:     m,
		Headroom:   marginHeadroom(m),
		Configured: b.base,
		Measured:   quantile(&b.cur, &b.prev, lateQuantile),
		Feedback:   b.feedbackLocked(now),
		Max:        b.most,
	}
}

// MarginSnapshot is a channel's pacing margin in one worker process.
type MarginSnapshot struct {
	// Margin is the lateness the spacing absorbs now (the largest of the
	// three below, within Max); Headroom its fraction, Margin/(1s+Margin),
	// by which the channel's paced limits are widened.
	Margin   time.Duration
	Headroom float64
	// Configured is the configured headroom's margin; Measured the 99.9th
	// percentile of how late the last 10-20s of sends left after their
	// slots (0 with under 50 sends); Feedback what provider throttles after
	// late departures added, halving every minute.
	Configured, Measured, Feedback time.Duration
	// Max bounds Margin (Channel.MaxMargin).
	Max time.Duration
}

// maxMargin is MaxMargin with its default; negative: the headroom's own
// margin, fixed.
func (ch Channel) maxMargin() time.Duration {
	switch {
	case ch.MaxMargin == 0:
		return DefaultMaxMargin
	case ch.MaxMargin < 0:
		return 0
	}
	return ch.MaxMargin
}

// scopesOf returns the scope keys a send with fields marks when it leaves
// late: its sender's and its pair's.
func (h *handler) scopesOf(fields map[string]string) []string {
	return []string{h.pauseKey(channels.ScopeSender, fields), h.pauseKey(channels.ScopePair, fields)}
}

// departure measures how late a paced send left, where it leaves: when the
// HTTP client has written the request to its connection (httptrace
// WroteRequest; the last write, when the client writes it again on a new
// connection after a reused one failed), so that what happens between the
// handoff to the channel's Send and the wire counts too: the request's
// encoding, the wait for a connection (a dial, a TLS handshake), and a busy
// host's scheduling delays in between. On this project's 2-core host at
// 1,700 sends a second, that part added 5 to 13 ms to the 99.9th
// percentile of the lateness and up to 60 ms to single sends (issue 22).
// A send whose request is never written without error (a channel of one's
// own that is not HTTP, a request refused before it was sent) is measured
// at the handoff. A send already late at the handoff marks its scopes then
// (lateAtHandoff), so that a throttle judged while it is on its way sees it.
type departure struct {
	h      *handler
	slot   time.Time
	start  time.Time // the handoff to the channel's Send
	scopes []string
	paced  []throttle.Request // the send's GCRA limits
	// base, taken and headroom are the attempt's: what a push counts from
	// (pushIfLate).
	base     time.Time
	taken    takenAt
	headroom float64
	// wrote is 1 + the time from start to the last written request, in
	// ns (kept from start, so on the monotonic clock); 0: none written.
	wrote atomic.Int64
	// pushed is the lateness pushIfLate last pushed for, in ns (0: none):
	// a later write of the request (the transport's retry on a new
	// connection) that is later still pushes again.
	pushed atomic.Int64
}

// departing returns the departure of a send on reqs handed to the channel
// at start for a.slot (nil when the send is not paced) and ctx carrying
// its trace.
func (h *handler) departing(ctx context.Context, start time.Time, a *attempt, fields map[string]string, reqs []throttle.Request) (*departure, context.Context) {
	if a.slot.IsZero() {
		return nil, ctx
	}
	d := &departure{h: h, slot: a.slot, start: start, scopes: h.scopesOf(fields), paced: gcraLimits(reqs),
		base: a.base, taken: a.taken, headroom: a.headroom}
	if d.base.IsZero() {
		d.base = d.slot
	}
	h.margin.lateAtHandoff(start, start.Sub(d.slot), d.scopes...)
	return d, httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				d.wrote.Store(int64(time.Since(d.start)) + 1)
				d.pushIfLate(time.Since(d.slot))
			}
		},
	})
}

// latePusher is implemented by limiters that move a limit's later slots
// on after a late send (*throttle.Redis; see throttle.Redis.PushAfterLate).
type latePusher interface {
	PushAfterLate(ctx context.Context, slot, taken time.Time, late time.Duration, headroom float64, reqs ...throttle.Request) ([]time.Duration, error)
}

// latePushTimeout bounds a push: it runs beside the send, in the
// background, and a lost one only leaves the spacing as it was.
const latePushTimeout = 2 * time.Second

// pushAllowance is what a push adds to a send's lateness for the way from
// the wire to the provider's clock, which the worker cannot see: the
// push must cover the late send's arrival, and the margin it counts from
// is spent on the write. Logged send by send on the 2-core host, a send
// written 17.6ms after its slot reached the emulator 2.8ms later, and its
// push of 2.4ms left 81 in a second.
const pushAllowance = 5 * time.Millisecond

// pushIfLate moves the send's limits' later slots on when it left later
// after its slot, as first given (base: before any hold for a push), than
// the margin of the headroom it was paced at on one of them, less
// pushAllowance (throttle.Redis.PushAfterLate, with the lateness and the
// allowance): the measured margin covers a quantile of the departures,
// and a send later than it, with the one after it late too, made 81 sends
// of a number at 80/s in one second in `make bench-scale`. It runs at the
// request's write (or at done when none was written), in the background,
// once, or again when the transport writes the request again later still
// by over a millisecond (the second push is whole: more gap, never less);
// a channel paced with no headroom pushes nothing (every send would).
// late is from d.slot.
func (d *departure) pushIfLate(late time.Duration) {
	lp, ok := d.h.w.opts.Limiter.(latePusher)
	h := d.headroom
	if !ok || len(d.paced) == 0 || h <= 0 || h >= 1 {
		return
	}
	late += d.slot.Sub(d.base) + pushAllowance // from the slot first given, to the provider
	perSecond := headroomMargin(h)             // a limit's margin is this much a second of its period
	over := func(r throttle.Request) bool {
		return late > time.Duration(float64(perSecond)*r.Limit.Rate.Period.Seconds())
	}
	if !slices.ContainsFunc(d.paced, over) {
		return
	}
	if prev := d.pushed.Load(); prev != 0 && late <= time.Duration(prev)+time.Millisecond || !d.pushed.CompareAndSwap(prev, int64(late)) {
		return // pushed for this lateness already (or another write is pushing)
	}
	slot, w, ch := d.h.clock.limiter(d.base), d.h.w, d.h.ch.Name
	w.pushMu.Lock()
	defer w.pushMu.Unlock()
	if w.pushClosed {
		return // shut down: the handler outlived its timeout
	}
	w.pushing.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), latePushTimeout)
		defer cancel()
		// One call per time the limits' slots were taken (two after a
		// retake: the pushes made since count for each from its own).
		for _, g := range d.pacedByTaken() {
			if !slices.ContainsFunc(g.reqs, over) {
				continue // no limit of this group is late past its margin
			}
			moved, err := lp.PushAfterLate(ctx, slot, g.taken, late, h, g.reqs...)
			if err != nil {
				w.logger.Warn("a late send's limits could not be moved on; the spacing after it is as it was", "channel", ch, "late", late.Round(time.Millisecond/10), "err", err)
				continue
			}
			w.logger.Debug("a send left later than its margin: the slots after it moved on", "channel", ch, "late", late.Round(time.Millisecond/10), "moved", moved)
		}
	})
}

// takenGroup is a send's GCRA limits whose slots were taken at one time.
type takenGroup struct {
	taken time.Time
	reqs  []throttle.Request
}

// pacedByTaken groups the send's GCRA limits by when their slots were
// taken (d.taken), in the order of their first limit, each group's in
// its order.
func (d *departure) pacedByTaken() []takenGroup {
	var out []takenGroup
	for _, r := range d.paced {
		at := d.taken.of(r)
		i := slices.IndexFunc(out, func(g takenGroup) bool { return g.taken.Equal(at) })
		if i < 0 {
			out = append(out, takenGroup{taken: at})
			i = len(out) - 1
		}
		out[i].reqs = append(out[i].reqs, r)
	}
	return out
}

// done records the departure after the send returned and returns when the
// send left: its request's last write, or the handoff when none was
// written. A nil departure (not paced) records nothing and returns start.
func (d *departure) done(start time.Time) time.Time {
	if d == nil {
		return start
	}
	at := d.start
	if ns := d.wrote.Load(); ns != 0 {
		at = d.start.Add(time.Duration(ns - 1))
	}
	late := max(at.Sub(d.slot), 0)
	if d.wrote.Load() == 0 {
		d.pushIfLate(late) // measured at the handoff: no request written
	}
	d.h.margin.observe(at, late, d.scopes...)
	d.h.w.opts.Metrics.departed(d.h.ch.Name, late.Seconds())
	return at
}

// jitterScope is the scope key whose late sends explain a throttle of
// scope: the pair's for a pair throttle, else the sender's (an account
// throttle is drawn by its sender's sends).
func (h *handler) jitterScope(scope string, fields map[string]string) string {
	if scope == channels.ScopePair {
		return h.pauseKey(channels.ScopePair, fields)
	}
	return h.pauseKey(channels.ScopeSender, fields)
}

// adapted reports whether any of reqs' limits is adapted now (this
// process's cache of the shared state).
func (h *handler) adapted(ctx context.Context, reqs []throttle.Request) bool {
	if h.adapt == nil {
		return false
	}
	for _, a := range h.adapt.adapter.CachedAdaptations(ctx) {
		for _, r := range reqs {
			if r.Key == a.Key && r.Limit.Name == a.Limit {
				return true
			}
		}
	}
	return false
}

// jitterSpan is the span a provider counts a throttle of scope over: a
// pair's interval (WhatsApp 131056, 6s), else a second.
func (h *handler) jitterSpan(scope string) time.Duration {
	if scope == channels.ScopePair {
		return h.ch.PairBackoff
	}
	return time.Second
}

// Margins returns the pacing margin of every channel in this process,
// by channel name (/limits/, metrics).
func (w *Worker) Margins() map[string]MarginSnapshot {
	now := time.Now()
	out := make(map[string]MarginSnapshot, len(w.handlers))
	for name, h := range w.handlers {
		out[name] = h.margin.snapshot(now)
	}
	return out
}

// marginCollector reports the channels' margins at each scrape.
type marginCollector struct {
	src  atomic.Pointer[func() map[string]MarginSnapshot]
	desc *prometheus.Desc
}

func newMarginCollector() *marginCollector {
	return &marginCollector{desc: prometheus.NewDesc("sluice_pacing_margin_seconds",
		"A channel's pacing margin in this process, by part: in_force (what its paced limits are widened for), configured (its headroom's), measured (99.9th percentile of how late sends left, last 10-20s), feedback (from throttles after late departures), max (the bound).",
		[]string{"channel", "part"}, nil)}
}

func (c *marginCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *marginCollector) Collect(ch chan<- prometheus.Metric) {
	src := c.src.Load()
	if src == nil {
		return
	}
	for name, s := range (*src)() {
		for _, p := range []struct {
			part string
			d    time.Duration
		}{{"in_force", s.Margin}, {"configured", s.Configured}, {"measured", s.Measured}, {"feedback", s.Feedback}, {"max", s.Max}} {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, p.d.Seconds(), name, p.part)
		}
	}
}

// watchMargins makes the metrics report w's margins.
func (m *Metrics) watchMargins(w *Worker) {
	if m == nil || m.margins == nil {
		return
	}
	f := w.Margins
	m.margins.src.Store(&f)
}

// marginPublisher is implemented by limiters that share the processes'
// margins (*throttle.Redis), for /limits/.
type marginPublisher interface {
	PublishMargins(ctx context.Context, ms []throttle.Margin) error
}

// marginPublishEvery is how often a worker publishes its margins.
const marginPublishEvery = 2 * time.Second

// publishMargins publishes w's margins every marginPublishEvery until ctx
// ends. Failures are logged once a minute at most: the margins only inform.
func (w *Worker) publishMargins(ctx context.Context, p marginPublisher) {
	host, _ := os.Hostname()
	proc := fmt.Sprintf("%s:%d", host, os.Getpid())
	t := time.NewTicker(marginPublishEvery)
	defer t.Stop()
	var warned time.Time
	for {
		now := time.Now()
		var ms []throttle.Margin
		for name, s := range w.Margins() {
			ms = append(ms, throttle.Margin{Channel: name, Process: proc, Margin: s.Margin, Headroom: s.Headroom,
				Configured: s.Configured, Measured: s.Measured, Feedback: s.Feedback, Max: s.Max, At: now})
		}
		if err := p.PublishMargins(ctx, ms); err != nil && ctx.Err() == nil && now.Sub(warned) > time.Minute {
			warned = now
			w.logger.Warn("pacing margins: could not publish them for /limits/", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

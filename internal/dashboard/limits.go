package dashboard

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/limitview"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/throttle"
)

// Defaults of LimitsOptions.
const (
	DefaultLimitsRoot = "/limits"
	// DefaultMaxKeys is how many limiter keys a page details: each costs
	// about two Redis round trips (Status, and Backlog for GCRA).
	DefaultMaxKeys = 500
	// DefaultScanLimit is how many keys one page's SCAN looks at, at most,
	// before it stops and says that more exist.
	DefaultScanLimit = 10000
	// DefaultMaxPauses is how many paused scopes a page shows.
	DefaultMaxPauses = 200
	// DefaultMaxEvents is how many events a page shows, the newest of the
	// last DefaultEventScan entries of the stream.
	DefaultMaxEvents = 50
	DefaultEventScan = 500
	// DefaultRefresh is how often the page refreshes itself.
	DefaultRefresh = 2 * time.Second
	// DefaultLimitsTimeout bounds the Redis work of one request.
	DefaultLimitsTimeout = 5 * time.Second
	// MaxPrefixBytes bounds the ?prefix= filter.
	MaxPrefixBytes = 256
)

// detailWorkers is how many keys a request reads at once.
const detailWorkers = 8

// LimitsOptions configures NewLimits.
type LimitsOptions struct {
	// Limiter reads the limiter's keys, pauses and events (required): the
	// workers' (app.NewLimiter with the same key prefix).
	Limiter *throttle.Redis
	// Config is the workers' configuration (required): its rules say which
	// limit governs a key, its channels' headroom how sends are paced.
	Config *config.Config
	// RootPath is the path the handler is mounted at, without a trailing
	// slash. Default DefaultLimitsRoot ("/limits").
	RootPath string
	// MaxKeys is how many limiter keys a page details, in key order.
	// Default DefaultMaxKeys.
	MaxKeys int
	// ScanLimit is how many keys a page's SCAN looks at before it stops
	// (the page then says "more than N"). Default DefaultScanLimit; at
	// least MaxKeys.
	ScanLimit int
	// MaxPauses is how many paused scopes a page shows. Default
	// DefaultMaxPauses.
	MaxPauses int
	// MaxEvents is how many of the latest limits.* and provider.* events a
	// page shows. Default DefaultMaxEvents.
	MaxEvents int
	// Refresh is how often the page refreshes itself. Default
	// DefaultRefresh; at least 500ms.
	Refresh time.Duration
	// Timeout bounds one request's Redis work. Default
	// DefaultLimitsTimeout.
	Timeout time.Duration
	// Logger receives failures to read Redis (never secrets). Default
	// slog.Default().
	Logger *slog.Logger
}

// Limits serves the /limits/ dashboard (see NewLimits).
type Limits struct {
	o LimitsOptions
}

// NewLimits returns the handler of Sluice's limits dashboard, for paths
// under o.RootPath:
//
//   - GET {root}/: an HTML page (html/template, no external assets, laid
//     out for 1,280 px) that shows first the scopes paused now with the
//     provider's code and reason, since and until when, and who paused
//     them, and the latest limits.* and provider.* events; then every live
//     limiter key (up to MaxKeys, "showing N of M") grouped per channel and
//     limit (a <details> per limit, folded above FoldAbove keys) with its
//     capacity, remaining units, reset, configured and effective (adapted)
//     rate, override, backlog of planned sends, firm reservations ahead and
//     when the backlog drains (limitview.Drain: past the pauses that hold
//     it, at the pace in force); then the pacing margins. A small inline script reloads it every Refresh (with
//     JavaScript off, a meta refresh does). ?prefix=whatsapp:number: lists
//     only keys starting with it.
//   - GET {root}/data.json: the same data as JSON (Snapshot).
//   - GET {root}: a redirect to {root}/.
//
// Other methods get 405, other paths 404. Each request reads Redis within
// Timeout with bounded work: at most ScanLimit keys scanned, MaxKeys read
// (about two round trips each, eight at a time), MaxPauses pauses and two
// reads of the events stream. When Redis fails the answer is 503 and the
// error is logged. Authentication is the caller's to add (the lead's serve
// wraps the handler). Errors name the option that is wrong.
func NewLimits(o LimitsOptions) (*Limits, error) {
	if o.Limiter == nil {
		return nil, errors.New("dashboard: limits: Limiter is required")
	}
	if o.Config == nil {
		return nil, errors.New("dashboard: limits: Config is required")
	}
	root, err := cleanRoot(o.RootPath, DefaultLimitsRoot)
	if err != nil {
		return nil, fmt.Errorf("dashboard: limits: RootPath: %w", err)
	}
	o.RootPath = root
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{{"MaxKeys", &o.MaxKeys, DefaultMaxKeys}, {"ScanLimit", &o.ScanLimit, DefaultScanLimit},
		{"MaxPauses", &o.MaxPauses, DefaultMaxPauses}, {"MaxEvents", &o.MaxEvents, DefaultMaxEvents}} {
		if *f.v < 0 {
			return nil, fmt.Errorf("dashboard: limits: %s: want >= 0 (0: default %d), got %d", f.name, f.def, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	o.ScanLimit = max(o.ScanLimit, o.MaxKeys)
	switch {
	case o.Refresh == 0:
		o.Refresh = DefaultRefresh
	case o.Refresh < 500*time.Millisecond:
		return nil, fmt.Errorf("dashboard: limits: Refresh: want >= 500ms (0: default %v), got %v", DefaultRefresh, o.Refresh)
	}
	switch {
	case o.Timeout == 0:
		o.Timeout = DefaultLimitsTimeout
	case o.Timeout < 0:
		return nil, fmt.Errorf("dashboard: limits: Timeout: want > 0 (0: default %v), got %v", DefaultLimitsTimeout, o.Timeout)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Limits{o: o}, nil
}

// cleanRoot checks a mount path: "/name" (a trailing slash is dropped).
func cleanRoot(p, def string) (string, error) {
	if p == "" {
		return def, nil
	}
	p = strings.TrimSuffix(p, "/")
	if !strings.HasPrefix(p, "/") || p == "" || strings.ContainsAny(p, "?#%\\ ") || strings.Contains(p, "//") || strings.Contains(p, "/..") {
		return "", fmt.Errorf(`want a path such as "/limits", got %q`, p)
	}
	return p, nil
}

// ServeHTTP implements http.Handler.
func (h *Limits) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	root := h.o.RootPath
	switch r.URL.Path {
	case root, root + "/", root + "/data.json":
	default:
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if r.URL.Path == root {
		http.Redirect(w, r, root+"/", http.StatusMovedPermanently)
		return
	}
	prefix, err := parsePrefix(r.URL.Query().Get("prefix"))
	if err != nil {
		http.Error(w, "prefix: "+err.Error(), http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.o.Timeout)
	defer cancel()
	snap, err := h.Snapshot(ctx, prefix)
	if err != nil {
		h.o.Logger.WarnContext(r.Context(), "limits dashboard: read redis", "err", err)
		http.Error(w, "redis: unavailable, see the server's log", http.StatusServiceUnavailable)
		return
	}
	hdr := w.Header()
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	if strings.HasSuffix(r.URL.Path, ".json") {
		hdr.Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(snap)
		return
	}
	nonce := newNonce()
	hdr.Set("Content-Type", "text/html; charset=utf-8")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Content-Security-Policy", "default-src 'none'; script-src 'nonce-"+nonce+"'; style-src 'nonce-"+nonce+
		"'; connect-src 'self'; img-src 'self' data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	if err := limitsPage.Execute(w, pageData{Snapshot: snap, Groups: groupKeys(snap.Keys), Nonce: nonce, Refresh: h.o.Refresh}); err != nil {
		h.o.Logger.WarnContext(r.Context(), "limits dashboard: render", "err", err)
	}
}

// parsePrefix checks a ?prefix= filter: printable, no spaces, bounded.
func parsePrefix(p string) (string, error) {
	if len(p) > MaxPrefixBytes {
		return "", fmt.Errorf("want at most %d bytes, got %d", MaxPrefixBytes, len(p))
	}
	for _, c := range p {
		if c > unicode.MaxASCII || !unicode.IsPrint(c) || c == ' ' {
			return "", errors.New("want printable ASCII without spaces, as limiter keys are written")
		}
	}
	return p, nil
}

func newNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawStdEncoding.EncodeToString(b[:])
}

// Snapshot is what the dashboard shows, as GET data.json serves it: times
// in Unix ms, rates in units per second.
type Snapshot struct {
	At int64 `json:"at"` // when it was read (the limiter's clock when a key was read)
	// Prefix is the filter the keys were listed with ("" all).
	Prefix string `json:"prefix"`
	// Keys are the limiter keys shown (the first MaxKeys by key), those
	// with the longest backlogs first, then by key.
	Keys []KeyRow `json:"keys"`
	// KeysSeen is how many limiter keys (pauses aside) the scan saw;
	// KeysMore reports that it stopped at ScanLimit, so more exist.
	KeysSeen int  `json:"keys_seen"`
	KeysMore bool `json:"keys_more"`
	// Pauses are the scopes paused now, sorted by key; PausesMore reports
	// that more than MaxPauses were seen.
	Pauses     []limitview.Pause `json:"pauses"`
	PausesMore bool              `json:"pauses_more"`
	// Events are the latest limits.* and provider.* events, newest first.
	Events []limitview.Event `json:"events"`
	// Margins are the pacing margins the worker processes published in the
	// last throttle.MarginTTL, by channel then process.
	Margins []MarginRow `json:"margins"`
}

// MarginRow is one worker process's pacing margin for one channel
// (throttle.Margin): durations in milliseconds.
type MarginRow struct {
	Channel    string  `json:"channel"`
	Process    string  `json:"process"`
	Margin     float64 `json:"margin_ms"`
	Headroom   float64 `json:"headroom"`
	Configured float64 `json:"configured_ms"`
	Measured   float64 `json:"measured_ms"`
	Feedback   float64 `json:"feedback_ms"`
	Max        float64 `json:"max_ms"`
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// KeyRow is one limiter key.
type KeyRow struct {
	Key string `json:"key"`
	// Limit is the name of the configured rule that governs the key; ""
	// when none does (a key left by an older configuration): the fields
	// below are then zero.
	Limit     string `json:"limit"`
	Algorithm string `json:"algorithm"`
	Capacity  int64  `json:"capacity"`
	Remaining int64  `json:"remaining"`
	Reset     int64  `json:"reset"` // Unix ms: back to full capacity, or the window's end
	// Configured and Effective are the limit's rates (Effective lower
	// while adaptive limits hold it down; Adapted says why). Zero for
	// limits without a rate (concurrency, min_interval, distinct).
	Configured float64 `json:"configured"`
	Effective  float64 `json:"effective"`
	Adapted    string  `json:"adapted,omitempty"`
	// Override is the runtime override in force (`sluice limits set`).
	Override string `json:"override,omitempty"`
	// Rule describes the configured rule ("1/6s burst 1"); "" when none.
	Rule string `json:"rule,omitempty"`
	// GCRA limits: Paced is the pacing rate (Effective less headroom),
	// Backlog the planned sends, Reserved the firm reservations ahead of
	// now, NextDue and Planned when the first and last planned sends are
	// due by the plan (0 when none). Drains is when the last is expected
	// (limitview.Drain): Planned, or later when a pause holds the key
	// (HeldBy) or the pace in force is slower than the plan's, DrainsNote
	// saying why; 0 with a DrainsNote when no time can be said (a pause
	// until resumed).
	Paced      float64 `json:"paced,omitempty"`
	Backlog    int64   `json:"backlog"`
	Reserved   int64   `json:"reserved"`
	NextDue    int64   `json:"next_due,omitempty"`
	Planned    int64   `json:"planned_drains,omitempty"`
	Drains     int64   `json:"drains,omitempty"`
	DrainsNote string  `json:"drains_note,omitempty"`
	// HeldBy and HeldUntil are the pause that holds the backlog longest
	// and when it ends (0: until resumed).
	HeldBy    string `json:"held_by,omitempty"`
	HeldUntil int64  `json:"held_until,omitempty"`
}

// Snapshot reads what the page shows, for keys starting with prefix.
func (h *Limits) Snapshot(ctx context.Context, prefix string) (Snapshot, error) {
	lim := h.o.Limiter
	snap := Snapshot{At: time.Now().UnixMilli(), Prefix: prefix, Keys: []KeyRow{}, Pauses: []limitview.Pause{}, Events: []limitview.Event{}}
	var keys, pauseKeys []string
	var cursor uint64
	scanned := 0
	for {
		page, next, err := lim.ListPlanned(ctx, prefix, cursor, 500)
		if err != nil {
			return snap, err
		}
		for _, k := range page {
			if h.o.Config.Channels[rules.ChannelOf(k)] == nil {
				continue // not a channel's limit: the worker's own records ("failed:<queue>:<id>")
			}
			if throttle.IsPauseKey(k) {
				pauseKeys = append(pauseKeys, k)
			} else {
				keys = append(keys, k)
			}
		}
		scanned += len(page)
		if next == 0 {
			break
		}
		if scanned >= h.o.ScanLimit {
			snap.KeysMore = true
			break
		}
		cursor = next
	}
	slices.Sort(keys)
	keys = slices.Compact(keys) // SCAN may return a key twice
	slices.Sort(pauseKeys)
	pauseKeys = slices.Compact(pauseKeys)
	snap.KeysSeen = len(keys)
	if len(keys) > h.o.MaxKeys {
		keys = keys[:h.o.MaxKeys]
	}
	if len(pauseKeys) > h.o.MaxPauses {
		pauseKeys, snap.PausesMore = pauseKeys[:h.o.MaxPauses], true
	}

	// The pauses first: they hold the keys' backlogs (limitview.Drain).
	paused := []throttle.Paused{}
	for _, k := range pauseKeys {
		p, err := lim.PauseOf(ctx, k)
		if err != nil {
			return snap, err
		}
		if p != nil { // nil: ended since the scan
			paused = append(paused, *p)
			snap.Pauses = append(snap.Pauses, limitview.PauseOf(*p, time.Now()))
		}
	}

	overrides, err := lim.Overrides(ctx)
	if err != nil {
		return snap, err
	}
	kopts := limitview.KeyOptions{Overrides: overrides, Adaptations: limitview.ByKey(lim.CachedAdaptations(ctx)), Pauses: paused}
	rows := make([]KeyRow, len(keys))
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(detailWorkers, len(keys)) {
		wg.Go(func() {
			for i := range next {
				k, err := limitview.ReadKey(ctx, lim, h.o.Config, keys[i], kopts)
				rows[i], errs[i] = rowOf(k), err
			}
		})
	}
	for i := range keys {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return snap, err
	}
	// The keys with the longest backlogs first: what a person looks for
	// during a campaign; then by key.
	slices.SortStableFunc(rows, func(a, b KeyRow) int { return cmp.Compare(b.Backlog, a.Backlog) })
	snap.Keys = rows

	evs, err := limitview.Latest(ctx, lim, DefaultEventScan, func(typ string) bool {
		return strings.HasPrefix(typ, "limits.") || strings.HasPrefix(typ, "provider.")
	})
	if err != nil {
		return snap, err
	}
	for _, e := range evs[:min(len(evs), h.o.MaxEvents)] {
		snap.Events = append(snap.Events, limitview.EventOf(e))
	}
	margins, err := lim.Margins(ctx, time.Now())
	if err != nil {
		// The margins only inform: the page goes on without them.
		h.o.Logger.Warn("limits dashboard: read the pacing margins", "err", err)
	}
	snap.Margins = make([]MarginRow, 0, len(margins))
	for _, m := range margins {
		snap.Margins = append(snap.Margins, MarginRow{Channel: m.Channel, Process: m.Process, Margin: ms(m.Margin), Headroom: m.Headroom,
			Configured: ms(m.Configured), Measured: ms(m.Measured), Feedback: ms(m.Feedback), Max: ms(m.Max)})
	}
	return snap, nil
}

// rowOf is k's row.
func rowOf(k limitview.Key) KeyRow {
	row := KeyRow{Key: k.Key}
	if !k.Matched {
		return row
	}
	d := k.Decision
	row.Limit, row.Algorithm, row.Rule = k.Rule.Limit.Name, string(k.Limit.Algorithm), k.Rule.Describe()
	row.Capacity, row.Remaining = d.Limit, d.Remaining
	if !d.Reset.IsZero() {
		row.Reset = d.Reset.UnixMilli()
	}
	if k.RateLimited {
		row.Configured, row.Effective = k.Configured, k.Effective
	}
	if k.Adaptation != nil {
		row.Adapted = limitview.AdaptedWhy(*k.Adaptation)
	}
	if k.Override != nil {
		row.Override = k.Override.String() + " (on " + k.OverridePattern + ")"
	}
	if b := k.Backlog; b != nil {
		row.Paced, row.Backlog, row.Reserved = k.Paced, b.Planned, k.FirmAhead
		if b.Planned > 0 {
			row.NextDue, row.Planned = b.Next.UnixMilli(), b.Drains.UnixMilli()
			if d := k.Drain; !d.At.IsZero() {
				row.Drains = d.At.UnixMilli()
			}
			row.DrainsNote, row.HeldBy = k.Drain.Why(), k.Drain.HeldBy
			if !k.Drain.HeldUntil.IsZero() {
				row.HeldUntil = k.Drain.HeldUntil.UnixMilli()
			}
		}
	}
	return row
}

package emulator

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Channel names used in Record.Channel and as Stats keys.
const (
	ChannelWhatsApp = "whatsapp"
	ChannelSMS      = "sms"
	ChannelWebhook  = "webhook"
)

// Default credentials. They are test values for a local emulator only.
const (
	DefaultWhatsAppToken    = "test-token"
	DefaultTwilioAccountSID = "AC0123456789abcdef0123456789abcdef"
	DefaultTwilioAuthToken  = "test-auth-token"
	// DefaultWhatsAppAppSecret is the Meta app secret that signs the
	// WhatsApp emulator's status webhooks (X-Hub-Signature-256).
	DefaultWhatsAppAppSecret = "test-app-secret"
	// DefaultWebhookSecret is the example secret of the Standard Webhooks
	// specification (24 bytes once decoded).
	DefaultWebhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
)

// Magic recipient suffixes: a recipient whose digits end in one of these gets a
// scripted failure instead of being accepted (see the package documentation).
const (
	SuffixUndeliverable = "0000" // WhatsApp 131026 (HTTP 400), Twilio 21610 (HTTP 400)
	SuffixServerError   = "0500" // WhatsApp 131000 (HTTP 500), Twilio 20500 (HTTP 500)
)

// Default limits and timings (see the package documentation for sources).
const (
	DefaultWhatsAppMPS       = 80
	DefaultPairInterval      = 6 * time.Second
	DefaultTwilioMPS         = 1
	DefaultTwilioConcurrency = 100
	DefaultWebhookEndpoints  = 1
	DefaultWebhookRPS        = 10
	DefaultTolerance         = 0 // the pair interval is exact
	DefaultAddr              = "127.0.0.1"
)

// maxBody caps request bodies read by the emulators.
const maxBody = 1 << 20

// Options configures Start. Zero values mean the defaults in brackets.
type Options struct {
	// WhatsAppToken is the bearer token the WhatsApp emulator requires
	// ["test-token"].
	WhatsAppToken string
	// WhatsAppMPS is the number of messages accepted per phone-number-id in
	// any 1-second span, wherever it starts (in each calendar second with
	// CalendarSeconds) [80]. Over it: HTTP 400, code 130429. The count is
	// exact: Tolerance does not apply.
	WhatsAppMPS int
	// WhatsAppWebhookURL is the app's webhook callback URL (an absolute
	// http(s) URL), where the WhatsApp emulator posts each accepted
	// message's statuses, "sent" then "delivered", as Meta's webhooks do
	// (field "messages", value.statuses) [""; none are posted].
	WhatsAppWebhookURL string
	// WhatsAppAppSecret is the Meta app secret that signs those posts
	// with X-Hub-Signature-256 [DefaultWhatsAppAppSecret].
	WhatsAppAppSecret string
	// PairInterval is the minimum spacing of accepted messages from one
	// phone-number-id to one recipient, less Tolerance [6s]: with the default
	// Tolerance a message is accepted iff it comes at least PairInterval after
	// the pair's previous accepted one. Under it: HTTP 400, code 131056.
	PairInterval time.Duration

	// TwilioAccountSID and TwilioAuthToken are the HTTP Basic credentials
	// ["AC0123456789abcdef0123456789abcdef", "test-auth-token"]. The SID must
	// match ^AC[0-9a-fA-F]{32}$.
	TwilioAccountSID string
	TwilioAuthToken  string
	// TwilioMPS is the number of message segments accepted per From (or
	// MessagingServiceSid) in any 1-second span (in each calendar second with
	// CalendarSeconds) [1, a US long code]; Twilio's MPS is in segments
	// (GSM-7 160 characters alone, 153 a segment; UCS-2 70 and 67). A message
	// of more segments than this is accepted only when the span is empty,
	// and its segments count this many a second from then on. Over it: HTTP
	// 429, code 20429. The count is exact: Tolerance does not apply.
	TwilioMPS int
	// TwilioConcurrency is the number of requests per account that may be in
	// flight at once, Latency included [100]. Over it: HTTP 429, code 20429.
	TwilioConcurrency int

	// WebhookEndpoints is the number of customer webhook receivers, each on
	// its own listener and so its own host:port [1].
	WebhookEndpoints int
	// WebhookRPS is the number of requests each receiver accepts in any
	// 1-second span (in each calendar second with CalendarSeconds) [10]. Over
	// it: HTTP 429 with Retry-After, the seconds until a request would fit
	// (rounded up, at least 1). The count is exact: Tolerance does not apply.
	WebhookRPS int
	// WebhookSecret is the Standard Webhooks secret, "whsec_" followed by the
	// base64 of 24 to 64 bytes, shared by all receivers [DefaultWebhookSecret].
	WebhookSecret string

	// CalendarSeconds counts the per-second caps (WhatsAppMPS, TwilioMPS,
	// WebhookRPS) per calendar second, UTC-aligned [s, s+1) on Clock, instead
	// of over a sliding 1-second window on arrival time [false: sliding].
	// It is the looser reading: N at s.999 and N more at s+1 are all
	// accepted.
	CalendarSeconds bool
	// Tolerance is the jitter allowance on interval limits (PairInterval): a
	// request may arrive up to Tolerance before its slot [0: none, the check
	// is exact]. A negative value also means none. It does not apply to the
	// per-second caps, which are always exact.
	Tolerance time.Duration
	// Latency is the wall-clock processing time added to each accepted
	// request before its response [0]. It is not measured on Clock.
	Latency time.Duration
	// Clock supplies the time of rate checks, of records and of webhook
	// timestamp checks [time.Now].
	Clock func() time.Time

	// Addr is the host the listeners bind ["127.0.0.1"].
	Addr string
	// Ports optionally fixes the listeners' ports; zero fields mean an
	// ephemeral port.
	Ports Ports

	// hold, if set, is called by every accepted request while it is in flight
	// (before Latency), with the channel name. Tests use it to keep requests
	// in flight without sleeping.
	hold func(channel string)
}

// Ports fixes listener ports for standalone use. Zero means ephemeral.
type Ports struct {
	WhatsApp int // WhatsApp listener, which also serves /_emulator/...
	Twilio   int // Twilio listener
	// WebhookBase is the first receiver's port; receiver i listens on
	// WebhookBase+i.
	WebhookBase int
}

// Record is one accepted message.
type Record struct {
	Channel string    `json:"channel"` // "whatsapp", "sms" or "webhook"
	At      time.Time `json:"at"`      // acceptance time on Options.Clock
	// Sender is the phone-number-id (whatsapp), the From or else the
	// MessagingServiceSid (sms), or the receiver's host:port (webhook).
	Sender string `json:"sender"`
	// Recipient is the E.164 number with "+" (whatsapp, sms); "" for webhooks.
	Recipient string `json:"recipient"`
	// IdempotencyKey is the request's key ("" if it had none).
	IdempotencyKey string `json:"idempotency_key"`
	// Duplicate reports that an earlier accepted request of the same channel
	// had the same non-empty IdempotencyKey.
	Duplicate bool `json:"duplicate"`
	// ProviderID is the wamid (whatsapp) or the SM sid (sms); "" for webhooks.
	ProviderID string `json:"provider_id"`
	// Kind is what was sent: a WhatsApp message's type ("text",
	// "template", "image", "video", "audio", "document", "sticker"), a
	// Twilio message's ("sms", "mms", "content"); "" for webhooks.
	Kind string `json:"kind,omitempty"`
}

// ChannelStats counts one channel's responses.
type ChannelStats struct {
	// Accepted counts accepted requests, duplicates included.
	Accepted int `json:"accepted"`
	// Unique counts accepted requests with a key not seen before; an accepted
	// request without a key counts as unique. Accepted == Unique + Duplicates.
	Unique int `json:"unique"`
	// Duplicates counts accepted requests whose key was already accepted.
	Duplicates int `json:"duplicates"`
	// Throttled counts throttle responses (130429, 131056, 20429, 429).
	Throttled int `json:"throttled"`
	// Rejected counts 4xx validation and authentication errors, the magic
	// undeliverable recipients included.
	Rejected int `json:"rejected"`
	// Failed counts 5xx responses (the magic server-error recipients).
	Failed int `json:"failed"`
	// ThrottledByCode splits Throttled by provider code ("130429", "131056",
	// "20429", "429").
	ThrottledByCode map[string]int `json:"throttled_by_code"`
	// Probes counts credential checks (GET of the phone number or the
	// account: probes.go), which send nothing and are not in the counts
	// above.
	Probes int `json:"probes,omitempty"`
}

// statsJSON is one channel of GET /_emulator/stats: the counters and the
// measured MaxInAnySecond. (MaxInAnySecond is not a ChannelStats field, so
// that callers comparing whole ChannelStats values keep working.)
type statsJSON struct {
	ChannelStats
	MaxInAnySecond int `json:"max_in_any_second"`
}

// Server is a running set of emulators. Its methods are safe for concurrent
// use.
type Server struct {
	opts      Options       // resolved: no zero defaults left
	tolerance time.Duration // Options.Tolerance, 0 if negative; interval limits only
	whKey     []byte

	whatsappURL string
	twilioURL   string
	webhookURLs []string

	servers []*http.Server
	serving sync.WaitGroup
	done    chan struct{}

	closeOnce sync.Once
	closeErr  error

	// ctx is the context of the status callbacks the server posts;
	// cancel ends them (Close, under mu) and posts waits for them.
	ctx    context.Context
	cancel context.CancelFunc
	posts  sync.WaitGroup

	mu       sync.Mutex
	limiter  *limiter
	records  []Record
	stats    map[string]*ChannelStats
	seen     map[string]map[string]struct{}
	inflight map[string]int
	faults   map[string]*fault // channel|sender; see Fault
}

var twilioSIDPattern = regexp.MustCompile(`^AC[0-9a-fA-F]{32}$`)

// resolve fills defaults and validates opts.
func resolve(opts Options) (Options, error) {
	if opts.WhatsAppToken == "" {
		opts.WhatsAppToken = DefaultWhatsAppToken
	}
	if opts.TwilioAccountSID == "" {
		opts.TwilioAccountSID = DefaultTwilioAccountSID
	}
	if opts.WhatsAppAppSecret == "" {
		opts.WhatsAppAppSecret = DefaultWhatsAppAppSecret
	}
	if opts.WhatsAppWebhookURL != "" && !validCallbackURL(opts.WhatsAppWebhookURL) {
		return opts, fmt.Errorf("emulator: WhatsAppWebhookURL %q: want an absolute http(s) URL", opts.WhatsAppWebhookURL)
	}
	if opts.TwilioAuthToken == "" {
		opts.TwilioAuthToken = DefaultTwilioAuthToken
	}
	if opts.WebhookSecret == "" {
		opts.WebhookSecret = DefaultWebhookSecret
	}
	if opts.Addr == "" {
		opts.Addr = DefaultAddr
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	ints := []struct {
		name string
		v    *int
		def  int
	}{
		{"WhatsAppMPS", &opts.WhatsAppMPS, DefaultWhatsAppMPS},
		{"TwilioMPS", &opts.TwilioMPS, DefaultTwilioMPS},
		{"TwilioConcurrency", &opts.TwilioConcurrency, DefaultTwilioConcurrency},
		{"WebhookEndpoints", &opts.WebhookEndpoints, DefaultWebhookEndpoints},
		{"WebhookRPS", &opts.WebhookRPS, DefaultWebhookRPS},
	}
	for _, f := range ints {
		if *f.v < 0 {
			return opts, fmt.Errorf("emulator: %s: want >= 0 (0 means %d), got %d", f.name, f.def, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if opts.PairInterval < 0 {
		return opts, fmt.Errorf("emulator: PairInterval: want >= 0 (0 means %s), got %s", DefaultPairInterval, opts.PairInterval)
	}
	if opts.PairInterval == 0 {
		opts.PairInterval = DefaultPairInterval
	}
	if opts.Tolerance == 0 {
		opts.Tolerance = DefaultTolerance
	}
	if opts.Latency < 0 {
		return opts, fmt.Errorf("emulator: Latency: want >= 0, got %s", opts.Latency)
	}
	if !twilioSIDPattern.MatchString(opts.TwilioAccountSID) {
		return opts, fmt.Errorf("emulator: TwilioAccountSID: want ^AC[0-9a-fA-F]{32}$, got %q", opts.TwilioAccountSID)
	}
	if _, err := decodeWebhookSecret(opts.WebhookSecret); err != nil {
		return opts, fmt.Errorf("emulator: WebhookSecret: %w", err)
	}
	ports := []struct {
		name string
		v    int
	}{
		{"Ports.WhatsApp", opts.Ports.WhatsApp},
		{"Ports.Twilio", opts.Ports.Twilio},
		{"Ports.WebhookBase", opts.Ports.WebhookBase},
	}
	for _, p := range ports {
		if p.v < 0 || p.v > 65535 {
			return opts, fmt.Errorf("emulator: %s: want 0..65535, got %d", p.name, p.v)
		}
	}
	if b := opts.Ports.WebhookBase; b != 0 && b+opts.WebhookEndpoints-1 > 65535 {
		return opts, fmt.Errorf("emulator: Ports.WebhookBase: %d receivers from port %d go past 65535", opts.WebhookEndpoints, b)
	}
	return opts, nil
}

// decodeWebhookSecret returns the HMAC key of a "whsec_<base64>" secret.
func decodeWebhookSecret(secret string) ([]byte, error) {
	b64, ok := strings.CutPrefix(secret, "whsec_")
	if !ok {
		return nil, errors.New(`want "whsec_<base64>", got no "whsec_" prefix`)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("want whsec_<base64>: %w", err)
	}
	if len(key) < 24 || len(key) > 64 {
		return nil, fmt.Errorf("want 24 to 64 bytes once decoded, got %d", len(key))
	}
	return key, nil
}

// Start validates opts, opens all listeners and serves them until Close.
func Start(opts Options) (*Server, error) {
	opts, err := resolve(opts)
	if err != nil {
		return nil, err
	}
	key, _ := decodeWebhookSecret(opts.WebhookSecret) // validated by resolve
	tolerance := opts.Tolerance
	if tolerance < 0 {
		tolerance = 0
	}
	s := &Server{
		opts:      opts,
		tolerance: tolerance,
		whKey:     key,
		done:      make(chan struct{}),
		limiter:   newLimiter(opts.CalendarSeconds),
		inflight:  make(map[string]int),
	}
	s.ctx, s.cancel = backgroundContext()
	s.resetLocked()

	var listeners []net.Listener
	listen := func(name string, port int) (net.Listener, error) {
		addr := net.JoinHostPort(opts.Addr, strconv.Itoa(port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for _, l := range listeners {
				l.Close()
			}
			s.cancel()
			return nil, fmt.Errorf("emulator: listen %s on %s: %w", name, addr, err)
		}
		listeners = append(listeners, ln)
		return ln, nil
	}

	waLn, err := listen("whatsapp", opts.Ports.WhatsApp)
	if err != nil {
		return nil, err
	}
	twLn, err := listen("twilio", opts.Ports.Twilio)
	if err != nil {
		return nil, err
	}
	whLns := make([]net.Listener, opts.WebhookEndpoints)
	for i := range whLns {
		port := 0
		if opts.Ports.WebhookBase != 0 {
			port = opts.Ports.WebhookBase + i
		}
		if whLns[i], err = listen(fmt.Sprintf("webhook receiver %d", i), port); err != nil {
			return nil, err
		}
	}

	s.whatsappURL = "http://" + waLn.Addr().String()
	s.twilioURL = "http://" + twLn.Addr().String()
	s.serve(waLn, s.whatsAppHandler())
	s.serve(twLn, s.twilioHandler())
	for _, ln := range whLns {
		hostPort := ln.Addr().String()
		s.webhookURLs = append(s.webhookURLs, "http://"+hostPort+"/hooks")
		s.serve(ln, s.webhookHandler(hostPort))
	}
	return s, nil
}

func (s *Server) serve(ln net.Listener, h http.Handler) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	s.servers = append(s.servers, srv)
	s.serving.Go(func() { _ = srv.Serve(ln) }) // returns http.ErrServerClosed after Close
}

// closeGrace bounds Close's wait for requests in flight. It is longer than
// the 5 seconds net/http's Shutdown counts a connection accepted without a
// request yet (a client's dial cut short by its own shutdown) as active,
// so such a connection never makes Close fail.
const closeGrace = 6 * time.Second

// Close stops all listeners, aborts Latency waits, and waits up to
// closeGrace for in-flight requests to finish. It is safe to call more
// than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		close(s.done)
		s.cancelCallbacks()
		ctx, cancel := context.WithTimeout(context.Background(), closeGrace)
		defer cancel()
		var errs []error
		for _, srv := range s.servers {
			if err := srv.Shutdown(ctx); err != nil {
				errs = append(errs, err, srv.Close())
			}
		}
		s.serving.Wait()
		if err := errors.Join(errs...); err != nil {
			s.closeErr = fmt.Errorf("emulator: close: %w", err)
		}
	})
	return s.closeErr
}

// WhatsAppURL is the WhatsApp emulator's base URL, e.g. http://127.0.0.1:PORT;
// clients append /v23.0/{phone-number-id}/messages. The same listener serves
// the /_emulator/ introspection endpoints.
func (s *Server) WhatsAppURL() string { return s.whatsappURL }

// TwilioURL is the Twilio emulator's base URL; clients append
// /2010-04-01/Accounts/{AccountSid}/Messages.json.
func (s *Server) TwilioURL() string { return s.twilioURL }

// WebhookURLs are the receivers' full URLs, one per endpoint, e.g.
// http://127.0.0.1:PORT/hooks.
func (s *Server) WebhookURLs() []string { return append([]string(nil), s.webhookURLs...) }

// Records returns a copy of every accepted message, in acceptance order.
func (s *Server) Records() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Record{}, s.records...)
}

// Stats returns a copy of the counters under the keys "whatsapp", "sms" and
// "webhook".
func (s *Server) Stats() map[string]ChannelStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.statsLocked()
}

func (s *Server) statsLocked() map[string]ChannelStats {
	out := make(map[string]ChannelStats, len(s.stats))
	for ch, st := range s.stats {
		c := *st
		c.ThrottledByCode = make(map[string]int, len(st.ThrottledByCode))
		for code, n := range st.ThrottledByCode {
			c.ThrottledByCode[code] = n
		}
		out[ch] = c
	}
	return out
}

// MaxInAnySecond returns, under the keys "whatsapp", "sms" and "webhook", the
// largest number of accepted requests of one sender (Record.Sender: the
// phone-number-id, the From or MessagingServiceSid, the receiver's
// host:port) within any 1-second span, wherever it starts: the highest value
// of MaxInSpan(Records(), channel, time.Second), 0 when nothing was
// accepted. It is measured on the records at each call. By default it never
// exceeds the channel's per-second cap; with CalendarSeconds it can reach
// twice the cap (a burst across a whole second).
func (s *Server) MaxInAnySecond() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxInAnySecondLocked()
}

func (s *Server) maxInAnySecondLocked() map[string]int {
	out := make(map[string]int, len(s.stats))
	for ch := range s.stats {
		out[ch] = 0
		for _, n := range MaxInSpan(s.records, ch, time.Second) {
			out[ch] = max(out[ch], n)
		}
	}
	return out
}

// Reset clears records, counters, seen idempotency keys and limiter state.
// Requests in flight keep their concurrency slots.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resetLocked()
}

func (s *Server) resetLocked() {
	s.limiter.reset()
	s.records = nil
	s.stats = make(map[string]*ChannelStats)
	s.seen = make(map[string]map[string]struct{})
	for _, ch := range []string{ChannelWhatsApp, ChannelSMS, ChannelWebhook} {
		s.stats[ch] = &ChannelStats{ThrottledByCode: map[string]int{}}
		s.seen[ch] = make(map[string]struct{})
	}
}

// acceptLocked records an accepted message; s.mu must be held.
func (s *Server) acceptLocked(r Record) Record {
	st := s.stats[r.Channel]
	st.Accepted++
	if r.IdempotencyKey != "" {
		if _, dup := s.seen[r.Channel][r.IdempotencyKey]; dup {
			r.Duplicate = true
		} else {
			s.seen[r.Channel][r.IdempotencyKey] = struct{}{}
		}
	}
	if r.Duplicate {
		st.Duplicates++
	} else {
		st.Unique++
	}
	s.records = append(s.records, r)
	return r
}

// throttledLocked counts a throttle response; s.mu must be held.
func (s *Server) throttledLocked(channel, code string) {
	st := s.stats[channel]
	st.Throttled++
	st.ThrottledByCode[code]++
}

func (s *Server) countRejected(channel string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats[channel].Rejected++
}

func (s *Server) countFailed(channel string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats[channel].Failed++
}

// process is the accepted request's processing time: the test hook, then
// Latency (cut short by Close).
func (s *Server) process(channel string) {
	if s.opts.hold != nil {
		s.opts.hold(channel)
	}
	if s.opts.Latency <= 0 {
		return
	}
	t := time.NewTimer(s.opts.Latency)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.done:
	}
}

// introspection serves /_emulator/records, /_emulator/stats and
// /_emulator/reset on mux.
func (s *Server) introspection(mux *http.ServeMux) {
	mux.HandleFunc("GET /_emulator/records", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, s.Records())
	})
	mux.HandleFunc("GET /_emulator/stats", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		stats, maxIn := s.statsLocked(), s.maxInAnySecondLocked()
		s.mu.Unlock()
		out := make(map[string]statsJSON, len(stats))
		for ch, st := range stats {
			out[ch] = statsJSON{ChannelStats: st, MaxInAnySecond: maxIn[ch]}
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("POST /_emulator/reset", func(w http.ResponseWriter, _ *http.Request) {
		s.Reset()
		w.WriteHeader(http.StatusNoContent)
	})
	s.faultsHandler(mux)
}

// Run starts the emulators, writes their URLs and settings to w, serves until
// ctx is done, then closes them. It is the body of `sluice emulate`.
func Run(ctx context.Context, opts Options, w io.Writer) error {
	s, err := Start(opts)
	if err != nil {
		return err
	}
	if err := s.writeSummary(w, opts); err != nil {
		return errors.Join(fmt.Errorf("emulator: write summary: %w", err), s.Close())
	}
	<-ctx.Done()
	return s.Close()
}

// writeSummary prints the URLs and limits. Credentials are printed only when
// they are the built-in test defaults; given ones are not echoed.
func (s *Server) writeSummary(w io.Writer, given Options) error {
	o := s.opts
	show := func(given, value string) string {
		if given != "" {
			return "(as configured)"
		}
		return value
	}
	tol := "exact"
	if s.tolerance > 0 {
		tol = "tolerance " + s.tolerance.String()
	}
	mode := "per-second caps hold in any 1-s span (sliding window on arrival)"
	if o.CalendarSeconds {
		mode = "per-second caps count per calendar second (UTC-aligned)"
	}
	tol = mode + ", exact; pair interval " + tol
	var b strings.Builder
	fmt.Fprintf(&b, "whatsapp  %s/v23.0/{phone-number-id}/messages\n", s.whatsappURL)
	fmt.Fprintf(&b, "          bearer token %s; %d msg/s per phone-number-id (130429); 1 per %s per recipient (131056)\n",
		show(given.WhatsAppToken, o.WhatsAppToken), o.WhatsAppMPS, o.PairInterval)
	if o.WhatsAppWebhookURL != "" {
		fmt.Fprintf(&b, "          statuses posted to %s, signed with app secret %s\n", o.WhatsAppWebhookURL, show(given.WhatsAppAppSecret, o.WhatsAppAppSecret))
	}
	fmt.Fprintf(&b, "sms       %s/2010-04-01/Accounts/%s/Messages.json\n", s.twilioURL, o.TwilioAccountSID)
	fmt.Fprintf(&b, "          auth token %s; %d msg/s per From; %d concurrent requests (20429)\n",
		show(given.TwilioAuthToken, o.TwilioAuthToken), o.TwilioMPS, o.TwilioConcurrency)
	for i, u := range s.webhookURLs {
		fmt.Fprintf(&b, "webhook   %s (receiver %d)\n", u, i)
	}
	fmt.Fprintf(&b, "          secret %s; %d req/s per receiver (429, Retry-After)\n",
		show(given.WebhookSecret, o.WebhookSecret), o.WebhookRPS)
	fmt.Fprintf(&b, "          the receivers are on this host: a worker refuses such targets unless its config has\n")
	fmt.Fprintf(&b, "          egress: {allow_cidrs: [\"%s\"]}\n", loopbackCIDR(s.webhookURLs))
	fmt.Fprintf(&b, "rates     %s\n", tol)
	fmt.Fprintf(&b, "records   GET %s/_emulator/records\n", s.whatsappURL)
	fmt.Fprintf(&b, "stats     GET %s/_emulator/stats\n", s.whatsappURL)
	fmt.Fprintf(&b, "reset     POST %s/_emulator/reset\n", s.whatsappURL)
	_, err := io.WriteString(w, b.String())
	return err
}

// perSecondPhrase says how the per-second caps are counted, for error
// details.
func (s *Server) perSecondPhrase() string {
	if s.opts.CalendarSeconds {
		return "per calendar second"
	}
	return "in any 1-second span"
}

// loopbackCIDR is the /8 or /128 holding the first receiver's address.
func loopbackCIDR(urls []string) string {
	if len(urls) > 0 {
		if u, err := url.Parse(urls[0]); err == nil && strings.Contains(u.Hostname(), ":") {
			return u.Hostname() + "/128"
		}
	}
	return "127.0.0.0/8"
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client went away; nothing to do
}

// readBody reads at most maxBody bytes of r's body.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
}

// randomHex returns n random bytes as lowercase hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// randomToken returns n random bytes as unpadded base64url.
func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// digitsOnly reports whether s is non-empty and all ASCII digits.
func digitsOnly(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

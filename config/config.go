package config

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
	"github.com/sluice-dev/sluice/worker"
)

// Config is a whole Sluice configuration. Start from Default (or Load/Parse,
// which start from it); every field's default is written beside it and in
// sluice.example.yaml.
type Config struct {
	Redis   RedisConfig
	Worker  WorkerConfig
	HTTP    HTTPConfig
	Cleanup CleanupConfig
	Events  EventsConfig
	Egress  EgressConfig
	// Channels holds one entry per channel: whatsapp, sms, webhook and http,
	// always all four (a disabled channel has Enabled false).
	Channels map[string]*ChannelConfig
}

// RedisConfig says where the Redis used by asynq and the limiters is.
type RedisConfig struct {
	// Mode is how Sluice reaches Redis: RedisSingle (one server: URLEnv's
	// URL, else Addr), RedisCluster (a Redis Cluster: Addrs are some of its
	// nodes, the rest are found from them) or RedisSentinel (a master
	// followed through failovers by the Sentinels at Addrs, MasterName).
	// Default RedisSingle. `--redis URL` always means one server.
	Mode string
	// Addrs are host:port of the cluster's seed nodes (RedisCluster) or of
	// the Sentinels (RedisSentinel); 1 to 64, required in those modes and
	// refused in RedisSingle.
	Addrs []string
	// MasterName is the name the Sentinels monitor the master under
	// (RedisSentinel, required; sentinel.conf "sentinel monitor NAME").
	MasterName string
	// UsernameEnv and PasswordEnv name the environment variables holding
	// the Redis ACL user and password of the cluster's nodes or the
	// Sentinel's master and replicas (RedisCluster, RedisSentinel; a single
	// server's are in its URL). SentinelUsernameEnv and SentinelPasswordEnv
	// name the ones holding the Sentinels' own ACL user and password
	// (requirepass, or an ACL user, in sentinel.conf). Each is optional:
	// unset in the file means none; named in the file, the variable must be
	// set. The values never go in the file or in logs.
	UsernameEnv, PasswordEnv, SentinelUsernameEnv, SentinelPasswordEnv string
	// TLS connects to the cluster's nodes, or to the Sentinels and their
	// master and replicas, over TLS 1.2 or later, verifying each server's
	// certificate (RedisCluster, RedisSentinel; a single server takes TLS
	// with a rediss:// URL). TLSCAFile is a PEM file of the certificate
	// authorities to trust instead of the system's; TLSServerName the
	// name the certificates must carry, where it is not the host of the
	// address dialled (nodes announced by IP with a certificate for a name).
	TLS                      bool
	TLSCAFile, TLSServerName string
	// URLEnv names the environment variable holding a redis://, rediss:// or
	// unix:// URL. The URL (it may carry a password) never goes in the file.
	// Empty means never read the environment. Default "REDIS_URL". Read in
	// RedisSingle only.
	URLEnv string
	// Addr is host:port, used when the URLEnv variable is unset or empty.
	// Default "127.0.0.1:6379".
	Addr string
	// DB is the Redis database number used with Addr, or on the Sentinel's
	// master. Default 0; a cluster has database 0 only.
	DB int
	// KeyPrefix starts every limiter key ("sluice:whatsapp:number:…").
	// Default "sluice".
	KeyPrefix string
}

// Redis modes (RedisConfig.Mode).
const (
	RedisSingle   = "single"
	RedisCluster  = "cluster"
	RedisSentinel = "sentinel"
)

// WorkerConfig tunes the asynq server.
type WorkerConfig struct {
	// Concurrency is the number of tasks processed at once. Default 2,000
	// (worker.DefaultConcurrency): planned sends wait for their slot in a
	// worker, so most of them are waiting, not sending.
	Concurrency int
	// DelayedTaskCheckInterval is how often asynq moves due retry and
	// scheduled tasks to pending. At most 1s, so a throttled task runs close to
	// its RetryAfter. Default 100ms.
	DelayedTaskCheckInterval time.Duration
	// TaskCheckInterval is how often an idle worker polls empty queues.
	// Default 50ms.
	TaskCheckInterval time.Duration
	// ShutdownTimeout is how long in-flight tasks get to finish on shutdown.
	// Default 30s.
	ShutdownTimeout time.Duration
	// MaxRetry is the asynq MaxRetry `sluice send` and `sluice enqueue`
	// give tasks: the most failed attempts (provider throttles, transient
	// failures) a task may have whatever its channel's retry budget allows;
	// Sluice's own limits never use it up. Default 100
	// (tasks.DefaultMaxRetry): the channels' budgets (channels.<name>.retry)
	// end a failing task first.
	MaxRetry int
}

// HTTPConfig is `sluice serve`'s HTTP server: /healthz, /metrics, the
// enqueue API under /v1, the dashboards under /queues/ and /limits/ and the
// providers' delivery callbacks under /callbacks/. API keys never come from
// this file: they are read from SLUICE_API_KEYS (APIKeysEnv).
type HTTPConfig struct {
	// Listen is host:port; empty disables the server. Default "127.0.0.1:9090".
	// A non-loopback address is refused unless API keys are configured.
	Listen string
	// PublicURL is the server's base URL as providers reach it
	// ("https://sluice.example.com", no path): Twilio sends ask for status
	// callbacks at PublicURL + "/callbacks/twilio", and X-Twilio-Signature is
	// checked against that URL. Empty: no status callbacks are requested, and
	// signatures are checked against the URL the request names.
	PublicURL string
	// APIRate limits each API key's requests to the /v1 API (GCRA; a batch
	// is one request). Default 100/s.
	APIRate throttle.Rate
	// APIBurst is how many requests a key may make at once above APIRate.
	// Default 100.
	APIBurst int
	// MaxBodyBytes bounds a request body (an API batch of 1,000 items, a
	// provider callback). Default 4 MiB.
	MaxBodyBytes int
	// QueuesReadOnly turns off the queue dashboard's actions (delete, run,
	// archive, pause queue). Without API keys the dashboard is always read-only.
	QueuesReadOnly bool
}

// APIKeysEnv is the environment variable holding the API keys:
// comma-separated "key" or "key:tenant".
const APIKeysEnv = "SLUICE_API_KEYS"

// HTTP defaults.
const (
	DefaultAPIBurst     = 100
	DefaultMaxBodyBytes = 4 << 20
	// MaxMaxBodyBytes bounds http.max_body_bytes.
	MaxMaxBodyBytes = 64 << 20
)

// DefaultAPIRate is http.api_rate's default.
var DefaultAPIRate = throttle.PerSecond(100)

// CleanupConfig schedules the sweep of expired limiter keys.
type CleanupConfig struct {
	// Schedule is a robfig/cron spec: 5 fields or a descriptor such as
	// "@every 1m" or "@hourly". Default "@every 1m".
	Schedule string
	// Batch is the number of keys per SCAN page. Default 500.
	Batch int
}

// EventsConfig configures the limiter's events stream, the limits.exceeded
// and limits.warning entries read by `sluice events tail`.
type EventsConfig struct {
	// Enabled writes events. Default true.
	Enabled bool
	// MaxLen caps the stream's length (XADD MAXLEN ~): older events are
	// trimmed. Default 10000.
	MaxLen int64
	// WarnAt is the share of a limit's capacity (0 to 1) below which the
	// units left after a send raise a limits.warning; 0 turns warnings off.
	// Default 0.1.
	WarnAt float64
}

// EgressConfig says where webhook deliveries and HTTP calls may connect. Their
// target URLs come from tasks, so by default every address in a private,
// loopback, link-local, unique-local, multicast, unspecified, CGNAT or
// reserved range, and the IPv4-mapped forms of those, is refused, checked on
// the address actually dialled (channels.Egress). WhatsApp and Twilio use
// their configured base_url and are not restricted.
type EgressConfig struct {
	// AllowCIDRs admits these ranges all the same: "127.0.0.0/8" for a
	// receiver on the same host, "10.20.0.0/16" for internal services.
	// Default none.
	AllowCIDRs []netip.Prefix
}

// WebhookEndpoint is one named endpoint's signing secrets
// (channels.webhook.endpoints.<name>).
type WebhookEndpoint struct {
	// SecretEnv names the environment variable holding the endpoint's
	// Standard Webhooks secret, whsec_…: every delivery to the endpoint is
	// signed with it, and with no other endpoint's. Required.
	SecretEnv string
	// PreviousSecretEnv names the one holding the secret SecretEnv's
	// replaces, during a rotation: both signatures are sent, the current
	// one first. Default "" (none).
	PreviousSecretEnv string
	// URLs are the URL prefixes the endpoint's secrets may sign for
	// (tasks.URLUnder: same scheme and host, the path continuing the
	// prefix's at a "/"), such as "https://hooks.example.com/billing/". A
	// delivery naming the endpoint to any other URL is refused at enqueue
	// and archived by the worker, unsigned; one naming no endpoint may not
	// go under them. Required, 1 to 32: a delivery's URL and body are the
	// caller's, so an unbound secret would sign whatever a caller sends
	// to a URL of theirs, to be replayed to the endpoint.
	URLs []string
}

// ChannelConfig configures one channel. Fields a channel does not use stay
// empty; the file may only set the fields of its channel.
type ChannelConfig struct {
	// Name is the channel's name (the key under channels:); not set in the file.
	Name string
	// Enabled runs the channel's handler. Default true.
	Enabled bool
	// Queue is the asynq queue of the channel's tasks. Default the channel name.
	Queue string
	// Priority is the queue's weight among all queues (asynq Config.Queues),
	// and each of its queue groups' (queue_groups); >= 1. Default 1.
	Priority int
	// BaseURL is the provider API's base URL (whatsapp, sms). Defaults
	// "https://graph.facebook.com" and "https://api.twilio.com".
	BaseURL string
	// APIVersion is the Graph API version (whatsapp), "v23.0".
	APIVersion string
	// TokenEnv names the environment variable holding the WhatsApp access
	// token (whatsapp). Default "WHATSAPP_TOKEN".
	TokenEnv string
	// AccountSIDEnv and AuthTokenEnv name the environment variables holding
	// the Twilio credentials (sms). Defaults "TWILIO_ACCOUNT_SID" and
	// "TWILIO_AUTH_TOKEN".
	AccountSIDEnv string
	AuthTokenEnv  string
	// SigningSecretEnv names the environment variable holding the Standard
	// Webhooks signing secret, whsec_… (webhook), of the deliveries that
	// name no endpoint, and of every endpoint while Endpoints is empty.
	// Default "WEBHOOK_SECRET".
	SigningSecretEnv string
	// PreviousSigningSecretEnv names the environment variable holding the
	// secret SigningSecretEnv's replaces, during a rotation (webhook): while
	// it is set in the file, each delivery carries both signatures in
	// webhook-signature, the current one first (Standard Webhooks
	// "Signature scheme": a receiver accepts any one it can verify), so
	// receivers can move to the new secret at their own pace. Default ""
	// (none). The file names it, and the variable must then be set.
	PreviousSigningSecretEnv string
	// Templates declares approved WhatsApp templates' shapes (whatsapp;
	// YAML templates: {name: {header, body_params, buttons}}): a send of a
	// declared template whose header, number of body parameters or button
	// values do not fit is refused at enqueue, as Meta would refuse it
	// (132000, 132012). Templates not declared are not checked. Default
	// none.
	Templates map[string]tasks.TemplateShape
	// Endpoints gives named customer endpoints secrets of their own
	// (webhook; YAML endpoints: {name: {secret_env, previous_secret_env}}),
	// by the name a delivery gives (tasks.WebhookDeliver.Endpoint). Once
	// any is listed, a delivery must name one of them or none (the
	// default secret above): an unknown name is refused at enqueue, and
	// archived by the worker. Empty (the default): every endpoint is
	// signed with the default secret.
	Endpoints map[string]WebhookEndpoint
	// AppSecretEnv names the environment variable holding the Meta app
	// secret that signs WhatsApp webhook posts (X-Hub-Signature-256), and
	// VerifyTokenEnv the one holding the verify token of the webhook's
	// subscription (whatsapp). Both are optional: while either is unset,
	// POST/GET /callbacks/whatsapp answer 404 (internal/callbacks).
	// Defaults "WHATSAPP_APP_SECRET" and "WHATSAPP_VERIFY_TOKEN".
	AppSecretEnv   string
	VerifyTokenEnv string
	// ChannelSettings are the channel's tunables. The settings table in
	// settings.go lists them and gives each its YAML key, default, bounds
	// and documentation (generated into sluice.example.yaml), and
	// ChannelSettings.Apply turns them into worker.Channel's fields.
	ChannelSettings
	// Adaptive tunes adaptive limits (YAML section adaptive: enabled,
	// decrease, floor, increase, quiet, margin, ceiling_ttl;
	// docs/adaptive.md): a provider's rate throttle lowers the rate of the
	// limits its scope concerns, quiet periods raise it back. Default on,
	// with the throttle.DefaultAdapt* values.
	Adaptive throttle.AdaptOptions
	// Limits are the channel's limit rules, checked in order. Defaults: the
	// provider limits in sluice.example.yaml. Use Rules to read them.
	Limits []rules.Rule
	// Retry is the channel's retry budget (YAML mapping with schedule, a
	// list of waits; max_attempts; max_age): how much failing, provider
	// throttles and transient failures, a task may do before it is
	// archived with the reason. Sluice's own limits never use it up. When
	// given it replaces the default as a whole. Defaults
	// worker.DefaultProviderRetry for whatsapp and sms (max_age 24h),
	// worker.DefaultWebhookRetry for webhook and http (schedule 5s, 5m, 30m,
	// 2h, 5h, 10h, 10h: 8 attempts; such a task also raises
	// endpoint.failing).
	Retry worker.RetryBudget
}

// MatchRule returns the configured rule whose key template renders to key
// (a limiter key without prefix, "whatsapp:daily:+12025550123"): the rule of
// the channel named by the key's scope that rules.Match finds.
func (c *Config) MatchRule(key string) (rules.Rule, bool) {
	cc := c.Channels[rules.ChannelOf(key)]
	return rules.Match(cc.Rules(), cc.spreadBy(), key)
}

// MatchPattern returns the configured rules a pattern "prefix*" can name
// (rules.MatchPrefix within the channel named by the prefix's scope).
func (c *Config) MatchPattern(prefix string) []rules.Rule {
	cc := c.Channels[rules.ChannelOf(prefix)]
	return rules.MatchPrefix(cc.Rules(), cc.spreadBy(), prefix)
}

// Queues returns the channel's asynq queues: its queue and, with spread_by
// and queue_groups above 1, its groups, as the channel's workers serve them
// (worker.Channel.Queues).
func (c *ChannelConfig) Queues() []string {
	return worker.Channel{Name: c.Name, Queue: c.Queue, SpreadBy: c.SpreadBy, QueueGroups: c.QueueGroups}.Queues()
}

// spreadBy is the channel's spread_by, "" for none or no channel.
func (c *ChannelConfig) spreadBy() string {
	if c == nil {
		return ""
	}
	return c.SpreadBy
}

// Rules returns a copy of the channel's limit rules, in order.
func (c *ChannelConfig) Rules() []rules.Rule {
	if c == nil {
		return nil
	}
	return slices.Clone(c.Limits)
}

// Rule returns the channel's rule whose limit is named name ("pair",
// "daily"), and false when it has none.
func (c *ChannelConfig) Rule(name string) (rules.Rule, bool) {
	if c != nil {
		for _, r := range c.Limits {
			if r.Limit.Name == name {
				return r, true
			}
		}
	}
	return rules.Rule{}, false
}

// channelNames are the known channels in their documented order, from the
// tasks registry.
var channelNames = tasks.Channels()

// Default returns the built-in configuration: what sluice.example.yaml says,
// with the providers' published limits (sources in that file). Each call
// returns a new value.
func Default() *Config {
	gcra := func(name, key string, r throttle.Rate) rules.Rule {
		return rules.Rule{Limit: throttle.Limit{Name: name, Algorithm: throttle.GCRA, Rate: r, Burst: 1}, Key: key, Cost: 1}
	}
	// Per-second caps are GCRA with burst 1, paced by reservation: sends
	// spaced at the interval, so no 1-second span, wherever it starts,
	// holds more than the cap (sluice.example.yaml).
	perSecond := func(name, key string, n int64) rules.Rule {
		return gcra(name, key, throttle.PerSecond(n))
	}
	channel := func(name string) *ChannelConfig {
		return &ChannelConfig{
			Name:            name,
			Enabled:         true,
			Queue:           name,
			Priority:        1,
			ChannelSettings: defaultSettings(name),
			Adaptive:        defaultAdaptive(),
		}
	}

	wa := channel("whatsapp")
	wa.BaseURL = "https://graph.facebook.com"
	wa.APIVersion = "v23.0"
	wa.TokenEnv = "WHATSAPP_TOKEN"
	wa.AppSecretEnv = "WHATSAPP_APP_SECRET"
	wa.VerifyTokenEnv = "WHATSAPP_VERIFY_TOKEN"
	wa.Limits = []rules.Rule{
		perSecond("throughput", "whatsapp:number:{phone_number_id}", 80),
		gcra("pair", "whatsapp:pair:{phone_number_id}:{to}", throttle.Rate{Limit: 1, Period: 6 * time.Second}),
		{Limit: throttle.Limit{Name: "daily", Algorithm: throttle.FixedWindow, Rate: throttle.PerDay(250)}, Key: "whatsapp:daily:{to}", Cost: 1},
	}

	sms := channel("sms")
	sms.BaseURL = "https://api.twilio.com"
	sms.AccountSIDEnv = "TWILIO_ACCOUNT_SID"
	sms.AuthTokenEnv = "TWILIO_AUTH_TOKEN"
	sender := perSecond("sender", "sms:sender:{sender}", 1)
	sender.CostField = "segments" // Twilio's MPS is in message segments
	sms.Limits = []rules.Rule{
		sender,
		{Limit: throttle.Limit{Name: "concurrency", Algorithm: throttle.Concurrency, Max: 100, Lease: throttle.DefaultLease}, Key: "sms:account:{account_sid}", Cost: 1},
	}

	wa.Retry, sms.Retry = providerRetry(), providerRetry()

	webhook := channel("webhook")
	webhook.SigningSecretEnv = "WEBHOOK_SECRET"
	webhook.Retry = webhookRetry()
	webhook.Limits = []rules.Rule{perSecond("host", "webhook:host:{host}", 10)}

	http := channel("http")
	http.Limits = []rules.Rule{perSecond("host", "http:host:{host}", 10)}
	http.Retry = webhookRetry()

	return &Config{
		Redis: RedisConfig{Mode: RedisSingle, URLEnv: "REDIS_URL", Addr: "127.0.0.1:6379", DB: 0, KeyPrefix: "sluice"},
		Worker: WorkerConfig{
			Concurrency:              worker.DefaultConcurrency,
			DelayedTaskCheckInterval: worker.DefaultDelayedTaskCheckInterval,
			TaskCheckInterval:        worker.DefaultTaskCheckInterval,
			ShutdownTimeout:          worker.DefaultShutdownTimeout,
			MaxRetry:                 tasks.DefaultMaxRetry,
		},
		HTTP:     HTTPConfig{Listen: "127.0.0.1:9090", APIRate: DefaultAPIRate, APIBurst: DefaultAPIBurst, MaxBodyBytes: DefaultMaxBodyBytes},
		Cleanup:  CleanupConfig{Schedule: "@every 1m", Batch: throttle.DefaultScanBatch},
		Events:   EventsConfig{Enabled: true, MaxLen: 10000, WarnAt: 0.1},
		Channels: map[string]*ChannelConfig{"whatsapp": wa, "sms": sms, "webhook": webhook, "http": http},
	}
}

// providerRetry and webhookRetry copy the worker's default budgets, so a
// Config never shares a schedule's array with another.
func providerRetry() worker.RetryBudget {
	b := worker.DefaultProviderRetry
	b.Schedule = slices.Clone(b.Schedule)
	return b
}

func webhookRetry() worker.RetryBudget {
	b := worker.DefaultWebhookRetry
	b.Schedule = slices.Clone(b.Schedule)
	return b
}

// MaxFileBytes bounds a configuration file (1 MiB): a real one is a few KiB.
const MaxFileBytes = 1 << 20

// Load reads the YAML file at path and returns Default overlaid with it,
// validated. Errors name path:line:column and the field; see Parse. A file
// over MaxFileBytes is refused unread.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if len(data) > MaxFileBytes {
		return nil, &Error{File: path, Err: fmt.Errorf("file is over %d bytes; a configuration is a few KiB", MaxFileBytes)}
	}
	return Parse(path, data)
}

// Parse reads YAML data and returns Default overlaid with it, validated.
// Sections, channels and fields the data omits keep their defaults; a
// channel's limits, when given, replace the default list. Unknown sections,
// channels and fields are errors.
//
// Every problem is reported, not just the first: the error joins one *Error
// per problem (errors.Join), sorted by position, each rendered as
// "name:line:column: field.path: message". A YAML syntax error is reported
// alone, with the line yaml gives.
func Parse(name string, data []byte) (*Config, error) {
	if len(data) > MaxFileBytes {
		return nil, &Error{File: name, Err: fmt.Errorf("file is %d bytes, want at most %d; a configuration is a few KiB", len(data), MaxFileBytes)}
	}
	cfg := Default()
	root, err := parseYAML(name, data)
	if err != nil {
		return nil, err
	}
	if root == nil {
		return cfg, nil
	}
	d := &decoder{file: name}
	d.config(root, cfg)
	if err := d.err(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// RedisURL returns the Redis URL: the value of the environment variable
// named by Redis.URLEnv when it is set and not empty, else
// "redis://<Addr>/<DB>". An error names the variable, never its value.
func (c *Config) RedisURL() (string, error) {
	if env := c.Redis.URLEnv; env != "" {
		if v := os.Getenv(env); v != "" {
			if err := checkRedisURL(v); err != nil {
				return "", fmt.Errorf("config: env %s: %w", env, err)
			}
			return v, nil
		}
	}
	if c.Redis.Addr == "" {
		return "", errors.New("config: redis: no URL in the environment and no addr")
	}
	return "redis://" + c.Redis.Addr + "/" + strconv.Itoa(c.Redis.DB), nil
}

// checkRedisURL reports whether u looks like a URL go-redis accepts. Its
// errors never quote u: the URL may carry a password.
func checkRedisURL(u string) error {
	p, err := url.Parse(u)
	if err != nil {
		return errors.New("not a valid URL (want redis://host:port/db, rediss://… or unix://…)")
	}
	switch p.Scheme {
	case "redis", "rediss":
		if p.Host == "" {
			return errors.New("URL has no host (want redis://host:port/db)")
		}
	case "unix":
		if p.Path == "" {
			return errors.New("unix URL has no socket path")
		}
	default:
		return errors.New("URL scheme must be redis, rediss or unix")
	}
	return nil
}

// Secret returns the value of the environment variable envName, such as a
// channel's TokenEnv. An unset or empty variable is an error that names the
// variable; the value never appears in an error. envName must look like the
// names the file accepts (A-Z, 0-9 and _).
func (c *Config) Secret(envName string) (string, error) {
	if !envNameRE.MatchString(envName) {
		// Not shown: it may be a secret passed by mistake.
		return "", errors.New("config: secret: want an environment variable name (A-Z, 0-9 and _); the argument is not shown")
	}
	v, ok := os.LookupEnv(envName)
	switch {
	case !ok:
		return "", fmt.Errorf("config: env %s is not set", envName)
	case v == "":
		return "", fmt.Errorf("config: env %s is empty", envName)
	}
	return v, nil
}

// Error is one problem in a configuration file.
type Error struct {
	File   string // the name given to Parse or the path given to Load
	Line   int    // 1-based; 0 if unknown
	Column int    // 1-based; 0 if unknown
	Path   string // the field, "channels.whatsapp.limits[1].rate"; empty for syntax errors
	Err    error
}

// Error renders "file:line:column: path: message".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
		if e.Column > 0 {
			b.WriteString(":" + strconv.Itoa(e.Column))
		}
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

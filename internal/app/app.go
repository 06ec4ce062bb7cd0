// Package app wires a configuration into Sluice's running parts: the Redis
// client, the limiter, the worker with one handler per enabled channel, the
// cleanup cron job and the /healthz and /metrics endpoints. `sluice serve`
// and `sluice demo` both build on it.
package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/hibiken/asynq/x/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/producer"
	"github.com/sluice-dev/sluice/redact"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
	"github.com/sluice-dev/sluice/worker"
)

// ConnectURL opens a Redis client for a redis://, rediss:// or unix:// URL
// and checks it answers. The URL, which may hold a password, is never logged
// and never in an error: errors show it as redact.URL gives it ("redis URL
// redis://[::1: missing ']' in host"). A URL with an '@' after a '/', '?' or
// '#' is refused: an unescaped '/' in a password would be parsed as the
// start of the path, and part of the password taken for the host.
func ConnectURL(ctx context.Context, url string) (redis.UniversalClient, error) {
	if redact.Ambiguous(url) {
		return nil, fmt.Errorf("redis URL %s: %s", redact.URL(url), redact.ParseError(nil, url))
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		// go-redis returns url.Parse's error, which quotes the whole URL.
		return nil, fmt.Errorf("redis URL %s: %s", redact.URL(url), redact.ParseError(err, url))
	}
	c := redis.NewClient(opt)
	if err := checkRedis(ctx, c); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("redis at %s: %w", redact.URL(url), err) // dial and AUTH errors name the address only
	}
	return c, nil
}

// Connect opens the Redis that r describes: with mode cluster a
// redis.ClusterClient on r.Addrs (the other nodes found from them), with
// mode sentinel a redis.FailoverClient that follows r.MasterName through
// failovers by the Sentinels at r.Addrs, with mode single ConnectURL of
// r's URL (config.Config.RedisURL). Credentials come from the variables r
// names, through secrets. Like ConnectURL it checks what it reached
// (checkRedis): every master answers, runs Redis 6.0 or later, and a
// cluster's state is ok. Errors name the mode and the addresses, never a
// password.
func Connect(ctx context.Context, cfg *config.Config, secrets Secrets) (redis.UniversalClient, error) {
	r := cfg.Redis
	if r.Mode == "" || r.Mode == config.RedisSingle {
		url, err := cfg.RedisURL()
		if err != nil {
			return nil, err
		}
		return ConnectURL(ctx, url)
	}
	if secrets == nil {
		secrets = cfg.Secret
	}
	var user, pass, suser, spass string
	for _, c := range []struct {
		field, env string
		dst        *string
	}{{"username_env", r.UsernameEnv, &user}, {"password_env", r.PasswordEnv, &pass},
		{"sentinel_username_env", r.SentinelUsernameEnv, &suser}, {"sentinel_password_env", r.SentinelPasswordEnv, &spass}} {
		if c.env == "" {
			continue
		}
		v, err := secrets(c.env)
		if err != nil {
			return nil, fmt.Errorf("redis.%s: %w", c.field, err)
		}
		*c.dst = v
	}
	tlsConfig, err := redisTLS(r)
	if err != nil {
		return nil, err
	}
	var dialer func(ctx context.Context, network, addr string) (net.Conn, error)
	if tlsConfig != nil {
		// The handshake within the dial timeout: the cluster's 1 s (a dead
		// master must be noticed), go-redis' 5 s to a Sentinel's servers.
		timeout := 5 * time.Second
		if r.Mode == config.RedisCluster {
			timeout = time.Second
		}
		dialer = tlsDialer(tlsConfig, timeout)
	}
	var c redis.UniversalClient
	switch r.Mode {
	case config.RedisCluster:
		// go-redis finds a failover's new master on a MOVED reply, or when
		// it reloads the slots, every minute by default: a master that died
		// answers nothing, so the reload is what moves its slots' traffic.
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: r.Addrs, Username: user, Password: pass, Dialer: dialer,
			DialTimeout: time.Second, ClusterStateReloadInterval: 2 * time.Second})
	case config.RedisSentinel:
		c = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: r.MasterName, SentinelAddrs: r.Addrs,
			SentinelUsername: suser, SentinelPassword: spass, Username: user, Password: pass, DB: r.DB, Dialer: dialer})
	default:
		return nil, fmt.Errorf("redis.mode: %q: want single, cluster or sentinel", r.Mode)
	}
	if err := checkRedis(ctx, c); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("redis %s at %s: %w", r.Mode, strings.Join(r.Addrs, ","), err)
	}
	return c, nil
}

// redisTLS is the TLS configuration of r's connections (nil without
// redis.tls): TLS 1.2 or later, each server's certificate verified against
// r.TLSCAFile's authorities (else the system's) for r.TLSServerName (else
// the host dialled).
func redisTLS(r config.RedisConfig) (*tls.Config, error) {
	if !r.TLS {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: r.TLSServerName}
	if r.TLSCAFile != "" {
		pool, err := config.CertPool(r.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("redis.tls_ca_file: %w", err)
		}
		c.RootCAs = pool
	}
	return c, nil
}

// tlsDialer dials addr over TCP within timeout and runs the TLS handshake
// with c. tls.Dialer verifies the certificate for c.ServerName or, when
// that is empty, the host of addr: a cluster's nodes and a Sentinel's
// master are found at addresses the configuration does not name, so one
// ServerName could not fit them all (go-redis' TLSConfig needs one).
func tlsDialer(c *tls.Config, timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout, KeepAlive: 5 * time.Minute}, Config: c}
	return d.DialContext
}

// MinRedisVersion is the oldest Redis Sluice runs on: its scripts use
// SET … KEEPTTL (6.0).
const MinRedisVersion = "6.0"

// checkRedis checks, within 5 s, that c's server answers and runs Redis
// MinRedisVersion or later; on a cluster, every master, and that the
// cluster's state is ok (CLUSTER INFO: no slot unserved).
func checkRedis(ctx context.Context, c redis.UniversalClient) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if cc, ok := c.(*redis.ClusterClient); ok {
		if err := clusterOK(ctx, cc); err != nil {
			return err
		}
		return cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			info, err := serverInfo(ctx, m)
			if err != nil {
				return err
			}
			return checkVersion(info)
		})
	}
	info, err := serverInfo(ctx, c)
	if err != nil {
		return err
	}
	if err := checkVersion(info); err != nil {
		return err
	}
	switch {
	case strings.Contains(info, "redis_mode:sentinel"):
		return errors.New("this is a Sentinel, which holds no data: set redis.mode: sentinel, with the Sentinels as redis.addrs and redis.master_name")
	case strings.Contains(info, "redis_mode:cluster"):
		return errors.New("this is a Redis Cluster node: set redis.mode: cluster, with some of its nodes as redis.addrs")
	}
	return nil
}

// serverInfo is the text of INFO server. A server that answers but refuses
// it (miniredis, the embedded default, has no such section; an ACL user
// may lack INFO) is taken as it is once it answers PING: "" then.
func serverInfo(ctx context.Context, c redis.Cmdable) (string, error) {
	info, err := c.Info(ctx, "server").Result()
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return "", c.Ping(ctx).Err()
	}
	return info, err
}

// clusterOK reports whether the cluster, as the node asked sees it, is in
// state ok (CLUSTER INFO: no slot unserved).
func clusterOK(ctx context.Context, cc *redis.ClusterClient) error {
	state, err := cc.ClusterInfo(ctx).Result()
	var rerr redis.Error
	switch {
	case errors.As(err, &rerr):
		return fmt.Errorf("CLUSTER INFO refused (%v): Sluice's Redis user needs it, to tell a cluster whose state is not ok", err)
	case err != nil:
		return err
	case !strings.Contains(state, "cluster_state:ok"):
		return errClusterState
	}
	return nil
}

// errClusterState is clusterOK's error for a cluster not in state ok.
var errClusterState = errors.New("cluster state is not ok (CLUSTER INFO): a slot is unserved or the cluster is forming")

// checkVersion reads redis_version from INFO server's text; a text
// without one passes.
func checkVersion(info string) error {
	for line := range strings.Lines(info) {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:")
		if !ok {
			continue
		}
		var major, minor int
		if _, err := fmt.Sscanf(v, "%d.%d", &major, &minor); err != nil {
			return fmt.Errorf("redis_version %q: not a version", v)
		}
		if major < 6 {
			return fmt.Errorf("Redis %s: Sluice needs Redis %s or later (its scripts use SET KEEPTTL)", v, MinRedisVersion)
		}
		return nil
	}
	return nil
}

// Secrets looks up a credential by the name of its environment variable.
type Secrets func(envName string) (string, error)

// Options are what a Worker needs besides the configuration.
type Options struct {
	// Secrets resolves credentials; nil means the environment (cfg.Secret).
	Secrets Secrets
	// HTTP is the client for provider requests; nil means one per channel
	// with the channel's timeout and no redirects, and for webhook and http
	// one that checks every dialled address against cfg.Egress
	// (channels.NewEgressHTTPClient). A client given here is used as is: for
	// webhook and http only the target URL's literal host is then checked,
	// so it must refuse private addresses itself. Tests use it.
	HTTP    *http.Client
	Logger  *slog.Logger
	Metrics *worker.Metrics
	// Clock, for tests, replaces Redis TIME in the limiter.
	Clock func() time.Time
	// Delivery records each accepted send and each archived task (an
	// internal/delivery.Store); nil: nothing is recorded.
	Delivery worker.DeliveryRecorder
}

// TwilioCallbackPath is where serve takes Twilio's status callbacks; with
// http.public_url set, each SMS asks Twilio to post there.
const TwilioCallbackPath = "/callbacks/twilio"

// OverrideRefresh is how often a limiter re-reads the runtime overrides set
// by `sluice limits set`: every worker honours a change within 1s.
const OverrideRefresh = throttle.DefaultOverrideRefresh

// NewLimiter returns the limiter over rdb with the configured key prefix and
// events stream, honouring runtime overrides.
func NewLimiter(cfg *config.Config, rdb redis.UniversalClient, clock func() time.Time) *throttle.Redis {
	return throttle.NewRedis(rdb, LimiterOptions(cfg, clock))
}

// LimiterOptions are the throttle.Options for cfg.
func LimiterOptions(cfg *config.Config, clock func() time.Time) throttle.Options {
	ev := cfg.Events
	warnAt := ev.WarnAt
	if warnAt == 0 {
		warnAt = -1 // config: 0 turns warnings off; throttle: negative does
	}
	return throttle.Options{
		Prefix:          cfg.Redis.KeyPrefix,
		Clock:           clock,
		Events:          throttle.EventOptions{Disabled: !ev.Enabled, MaxLen: ev.MaxLen, WarnAt: warnAt},
		OverrideRefresh: OverrideRefresh,
		ScanBatch:       int64(cfg.Cleanup.Batch),
	}
}

// NewWorker builds the worker for every enabled channel of cfg. A channel's
// missing credential is an error naming its environment variable.
func NewWorker(cfg *config.Config, rdb redis.UniversalClient, lim *throttle.Redis, opts Options) (*worker.Worker, error) {
	secrets := opts.Secrets
	if secrets == nil {
		secrets = cfg.Secret
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	var chans []worker.Channel
	var errs []error
	for _, name := range tasks.Channels() {
		cc := cfg.Channels[name]
		if cc == nil || !cc.Enabled {
			continue
		}
		ch, err := buildChannel(cc, egressOf(cfg.Egress.AllowCIDRs), secrets, opts.HTTP, cfg.HTTP.PublicURL)
		if err != nil {
			errs = append(errs, fmt.Errorf("channels.%s: %w", name, err))
			continue
		}
		chans = append(chans, ch)
	}
	queues := queueWeights(cfg)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(chans) == 0 {
		return nil, errors.New("no channel is enabled")
	}
	return worker.New(worker.Options{
		Redis:                    rdb,
		Limiter:                  lim,
		Channels:                 chans,
		Queues:                   queues,
		Concurrency:              cfg.Worker.Concurrency,
		DelayedTaskCheckInterval: cfg.Worker.DelayedTaskCheckInterval,
		TaskCheckInterval:        cfg.Worker.TaskCheckInterval,
		ShutdownTimeout:          cfg.Worker.ShutdownTimeout,
		Logger:                   logger,
		Metrics:                  opts.Metrics,
		Delivery:                 opts.Delivery,
	})
}

// buildChannel makes cc's worker.Channel. Credentials are read and their
// format checked here, so `serve` refuses to start with an error naming the
// variable rather than archiving every task later. Webhook and HTTP-call
// targets come from tasks: their client checks every dialled address with
// egress.
//
// With publicURL set, SMS sends ask Twilio for status callbacks at
// publicURL + TwilioCallbackPath.
func buildChannel(cc *config.ChannelConfig, egress channels.Egress, secrets Secrets, hc *http.Client, publicURL string) (worker.Channel, error) {
	if hc == nil {
		if cc.Name == "webhook" || cc.Name == "http" {
			hc = channels.NewEgressHTTPClient(egress)
		} else {
			hc = channels.NewHTTPClient()
		}
		hc.Timeout = cc.Timeout
	}
	rules := cc.Rules()
	var ch worker.Channel
	switch cc.Name {
	case "whatsapp":
		token, err := secrets(cc.TokenEnv)
		if err != nil {
			return ch, err
		}
		if err := credentialFormat(token); err != nil {
			return ch, fmt.Errorf("env %s: %w", cc.TokenEnv, err)
		}
		c := &channels.WhatsApp{BaseURL: cc.BaseURL, Version: cc.APIVersion, Token: token, HTTP: hc}
		if err := c.Validate(); err != nil {
			return ch, err
		}
		ch = worker.WhatsAppChannel(c, rules)
	case "sms":
		sid, err := secrets(cc.AccountSIDEnv)
		if err != nil {
			return ch, err
		}
		token, err := secrets(cc.AuthTokenEnv)
		if err != nil {
			return ch, err
		}
		if err := credentialFormat(token); err != nil {
			return ch, fmt.Errorf("env %s: %w", cc.AuthTokenEnv, err)
		}
		if err := channels.CheckAccountSID(sid); err != nil {
			return ch, fmt.Errorf("env %s: %w", cc.AccountSIDEnv, err)
		}
		c := &channels.Twilio{BaseURL: cc.BaseURL, AccountSID: sid, AuthToken: token, HTTP: hc}
		if publicURL != "" {
			c.StatusCallback = publicURL + TwilioCallbackPath
		}
		if err := c.Validate(); err != nil {
			return ch, err
		}
		ch = worker.SMSChannel(c, rules)
	case "webhook":
		keyring, err := webhookSecrets(cc, secrets)
		if err != nil {
			return ch, err
		}
		ch = worker.WebhookChannel(&channels.Webhook{HTTP: hc, Egress: egress, Secrets: keyring, Endpoints: webhookEndpoints(cc)}, rules)
	case "http":
		ch = worker.HTTPChannel(&channels.HTTPCaller{HTTP: hc, Egress: egress}, rules)
	default:
		return ch, fmt.Errorf("unknown channel %q", cc.Name)
	}
	ch.Queue = cc.Queue // the worker runs the channel's tasks only from it
	cc.ChannelSettings.Apply(&ch)
	ch.Retry = cc.Retry
	ch.Adaptive = cc.Adaptive
	return ch, nil
}

// queueWeights returns asynq's Config.Queues for the enabled channels of
// cfg: every queue of a channel (its queue and its queue groups) at the
// channel's priority. asynq draws among the non-empty queues by weight, so
// a channel's share of dequeues grows with its busy groups, up to its
// number of queues times its priority. Sharing the priority among the
// groups instead starved a channel with few busy senders (one busy group
// of 13 drew 1/13 of its weight), and Sluice holds dequeued sends for their
// slots, so a channel drawn more often does not send faster than its
// limits. Channels may share a plain queue: their priorities add up.
func queueWeights(cfg *config.Config) map[string]int {
	out := map[string]int{}
	for _, name := range tasks.Channels() {
		cc := cfg.Channels[name]
		if cc == nil || !cc.Enabled {
			continue
		}
		for _, q := range cc.Queues() {
			out[q] += cc.Priority
		}
	}
	return out
}

// webhookSecrets reads the webhook channel's signing secrets from the
// environment, each checked (channels.CheckSecret; the error names the
// variable, never the value): the default pair (signing_secret_env and
// previous_signing_secret_env) and each endpoint's (endpoints.<name>:
// secret_env, previous_secret_env). It returns channels.Webhook.Secrets:
// an endpoint's secrets, current first; the default's for a delivery that
// names none, or any endpoint while none is listed; ErrUnknownEndpoint
// for a name not listed. Each endpoint's secrets sign for its urls only
// (channels.Webhook.Endpoints), so a secret held by two of them, or by
// one and the default pair, would sign for the other's URLs: the same
// value under two bindings stops the start, naming both variables.
func webhookSecrets(cc *config.ChannelConfig, secrets Secrets) (func(endpoint string) ([]string, error), error) {
	type held struct{ binding, env string }
	owner := map[string]held{} // a secret's key (channels.SecretKey) → the first binding and variable holding it
	pair := func(binding, current, previous string) ([]string, error) {
		out := make([]string, 0, 2)
		for _, env := range []string{current, previous} {
			if env == "" {
				continue
			}
			v, err := secrets(env)
			if err != nil {
				return nil, err
			}
			key, err := channels.SecretKey(v)
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", env, err)
			}
			if first, ok := owner[key]; ok && first.binding != binding {
				return nil, fmt.Errorf("env %s holds the same secret as env %s (%s): each endpoint's secret signs for its own urls only, so no two endpoints, nor an endpoint and the default, may share one (moving an endpoint off the default secret, give it a new one)", env, first.env, first.binding)
			}
			owner[key] = held{binding, env}
			out = append(out, v)
		}
		return out, nil
	}
	def, err := pair("the default secret", cc.SigningSecretEnv, cc.PreviousSigningSecretEnv)
	if err != nil {
		return nil, fmt.Errorf("channels.webhook: %w", err)
	}
	byName := make(map[string][]string, len(cc.Endpoints))
	for _, name := range slices.Sorted(maps.Keys(cc.Endpoints)) {
		ep := cc.Endpoints[name]
		s, err := pair("endpoint "+name, ep.SecretEnv, ep.PreviousSecretEnv)
		if err != nil {
			return nil, fmt.Errorf("channels.webhook.endpoints.%s: %w", name, err)
		}
		byName[name] = s
	}
	return func(endpoint string) ([]string, error) {
		if endpoint == "" || len(byName) == 0 {
			return def, nil
		}
		if s, ok := byName[endpoint]; ok {
			return s, nil
		}
		return nil, channels.ErrUnknownEndpoint
	}, nil
}

// webhookEndpoints is channels.webhook.endpoints as the producer and the
// worker hold deliveries to it: each endpoint's URL prefixes.
func webhookEndpoints(cc *config.ChannelConfig) tasks.WebhookEndpoints {
	if len(cc.Endpoints) == 0 {
		return nil
	}
	m := make(tasks.WebhookEndpoints, len(cc.Endpoints))
	for name, ep := range cc.Endpoints {
		m[name] = ep.URLs
	}
	return m
}

// credentialFormat rejects a token that cannot be what a provider issued:
// surrounding whitespace (a newline from `$(cat file)`), inner spaces or
// control characters, which would be sent and refused on every request. The
// error never shows the value.
func credentialFormat(v string) error {
	if strings.TrimSpace(v) != v {
		return errors.New("has leading or trailing whitespace (the value is not shown)")
	}
	for _, r := range v {
		if r <= ' ' || r == 0x7f {
			return errors.New("contains spaces or control characters (the value is not shown)")
		}
	}
	return nil
}

// CleanupMetrics are the cleanup job's Prometheus series.
type CleanupMetrics struct {
	runs     prometheus.Counter
	reclaim  prometheus.Counter
	removed  prometheus.Counter
	failures prometheus.Counter
}

// NewCleanupMetrics registers the cleanup series on reg (nil: unregistered).
func NewCleanupMetrics(reg prometheus.Registerer) *CleanupMetrics {
	m := &CleanupMetrics{
		runs:     prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_cleanup_runs_total", Help: "Cleanup passes over the limiter keys."}),
		reclaim:  prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_cleanup_reclaimed_leases_total", Help: "Expired concurrency leases reclaimed (their workers died)."}),
		removed:  prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_cleanup_removed_keys_total", Help: "Limiter keys deleted because they had no TTL."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_cleanup_failures_total", Help: "Cleanup passes that failed."}),
	}
	if reg != nil {
		reg.MustRegister(m.runs, m.reclaim, m.removed, m.failures)
	}
	return m
}

// StartCleanup schedules lim.Cleanup and lim.SweepBacklogs (the places of
// planned tasks that were deleted or archived are released) on
// cfg.Cleanup.Schedule with robfig/cron. It logs only when a pass removed
// something or failed. Stop
// the returned cron to end it.
func StartCleanup(cfg *config.Config, lim *throttle.Redis, logger *slog.Logger, m *CleanupMetrics) (*cron.Cron, error) {
	c := cron.New(cron.WithChain(cron.SkipIfStillRunning(cron.DiscardLogger)))
	_, err := c.AddFunc(cfg.Cleanup.Schedule, func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		st, err := lim.Cleanup(ctx)
		m.runs.Inc()
		if err != nil {
			m.failures.Inc()
			logger.Warn("limiter cleanup failed", "err", err)
			return
		}
		m.reclaim.Add(float64(st.ReclaimedLeases))
		m.removed.Add(float64(st.RemovedKeys))
		if st.ReclaimedLeases > 0 || st.RemovedKeys > 0 {
			logger.Info("limiter cleanup", "scanned", st.Scanned, "reclaimed_leases", st.ReclaimedLeases, "removed_keys", st.RemovedKeys)
		}
		released, err := lim.SweepBacklogs(ctx, backlogGrace, taskGone(cfg, lim))
		if err != nil {
			m.failures.Inc()
			logger.Warn("backlog sweep failed", "err", err)
			return
		}
		if released > 0 {
			logger.Info("released the planned places of deleted or archived tasks", "released", released)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("cleanup.schedule %q: %w", cfg.Cleanup.Schedule, err)
	}
	c.Start()
	return c, nil
}

// backlogGrace is how long past its planned slot a task may still come
// back (workers restarting, a queue paused) before the cleanup job asks
// asynq whether it still exists.
const backlogGrace = 2 * time.Minute

// taskGone reports whether a planned task will never come back: asynq no
// longer has it in its channel's queue, or has archived or completed it.
func taskGone(cfg *config.Config, lim *throttle.Redis) func(scope, id string) (bool, error) {
	insp := asynq.NewInspectorFromRedisClient(lim.Client())
	return func(scope, id string) (bool, error) {
		channel := rules.ChannelOf(scope) // "whatsapp/1065" (spread_by) is whatsapp's
		cc := cfg.Channels[channel]
		if cc == nil {
			return false, nil // not a channel's key: leave it
		}
		info, err := tasks.FindTask(insp, cc.Queues(), id)
		switch {
		case tasks.NoSuchTask(err):
			// A send a batch task carries has no task of its own: its
			// claim, kept as batched, says so.
			typ, _ := tasks.ChannelTaskType(channel)
			held, cerr := producer.Batched(context.Background(), lim, typ, id)
			return !held, cerr
		case err != nil:
			return false, err
		}
		return info.State == asynq.TaskStateArchived || info.State == asynq.TaskStateCompleted, nil
	}
}

// NewRegistry returns the Prometheus registry serve exposes at /metrics,
// holding the Go runtime and process series and asynq's queue series from
// its x/metrics collector, read from rdb on each scrape: asynq_queue_size
// and asynq_queue_latency_seconds per queue and state, and
// asynq_tasks_processed_total and asynq_tasks_failed_total per queue
// (counts of the current day, as asynq keeps them). Sluice's own series are
// registered on it by their packages.
func NewRegistry(rdb redis.UniversalClient) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}),
		metrics.NewQueueMetricsCollector(asynq.NewInspectorFromRedisClient(rdb)))
	return reg
}

// HTTPHandler serves /healthz (200 "ok" while Redis answers, else 503) and
// /metrics (Prometheus, from gatherer). On a Redis Cluster, healthy is
// every master answering and the cluster's state ok (CLUSTER INFO, as the
// node asked sees it); through a Sentinel, the master it names answering.
// The 503's text says which, naming no address.
func HTTPHandler(rdb redis.UniversalClient, gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		if why := unhealthy(ctx, rdb); why != "" {
			http.Error(w, "redis: "+why, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	return mux
}

// unhealthy says why rdb cannot serve Sluice now; "" when it can.
func unhealthy(ctx context.Context, rdb redis.UniversalClient) string {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		if rdb.Ping(ctx).Err() != nil {
			return "unavailable"
		}
		return ""
	}
	switch err := clusterOK(ctx, cc); {
	case errors.Is(err, errClusterState):
		return "cluster state is not ok"
	case err != nil:
		return "unavailable"
	}
	if cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }) != nil {
		return "a cluster master is unavailable"
	}
	return ""
}

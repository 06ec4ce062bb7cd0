package dashboard

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"

	"github.com/hibiken/asynqmon"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/redact"
	"github.com/sluice-dev/sluice/tasks"
)

// DefaultQueuesRoot is QueuesOptions.RootPath's default.
const DefaultQueuesRoot = "/queues"

// QueuesOptions configures NewQueues.
type QueuesOptions struct {
	// Redis is the client of the Redis that holds the asynq queues
	// (required): Sluice's own (app.ConnectURL), shared, never closed by
	// the dashboard.
	Redis redis.UniversalClient
	// RootPath is the path the dashboard is mounted at, without a trailing
	// slash. Default DefaultQueuesRoot ("/queues").
	RootPath string
	// ReadOnly turns off every action (delete, run, archive, cancel, pause
	// or resume a queue): only GET and HEAD requests are served, the others
	// get 405. Default false.
	ReadOnly bool
	// PrometheusAddress, when set, is the Prometheus server asynqmon queries
	// for its metrics charts ("http://prometheus:9090"). Default none: the
	// charts are hidden and their endpoint answers 404.
	PrometheusAddress string
}

// sharedConn is an asynq.RedisConnOpt that hands asynqmon an existing
// client instead of a new connection pool.
type sharedConn struct{ c redis.UniversalClient }

func (s sharedConn) MakeRedisClient() any { return s.c }

// NewQueues returns asynqmon v0.7.2's web UI and API (queues, tasks and
// their counts, servers, Redis info) for paths under o.RootPath, over
// o.Redis. asynqmon's own Close would close the client it was given, so
// the returned handler has none: the client stays Sluice's to close. With
// ReadOnly, requests other than GET and HEAD are refused here, before
// asynqmon sees them (asynqmon's own read-only mode also hides the UI's
// buttons). asynqmon's task tables show a task's ID up to its first "-"
// (made for UUIDs); Sluice's IDs are idempotency keys ("sms-3fa8…",
// "order-100123-shipped"), so its UI script is served with the whole ID
// shown (wholeIDs). Errors name the option that is wrong.
func NewQueues(o QueuesOptions) (http.Handler, error) {
	if o.Redis == nil {
		return nil, errors.New("dashboard: queues: Redis is required")
	}
	root, err := cleanRoot(o.RootPath, DefaultQueuesRoot)
	if err != nil {
		return nil, fmt.Errorf("dashboard: queues: RootPath: %w", err)
	}
	if a := o.PrometheusAddress; a != "" && !strings.HasPrefix(a, "http://") && !strings.HasPrefix(a, "https://") {
		return nil, fmt.Errorf("dashboard: queues: PrometheusAddress: want an http:// or https:// URL, got %q", a)
	}
	mon := asynqmon.New(asynqmon.Options{
		RootPath:          root,
		RedisConnOpt:      sharedConn{o.Redis},
		ReadOnly:          o.ReadOnly,
		PrometheusAddress: o.PrometheusAddress,
		PayloadFormatter:  asynqmon.PayloadFormatterFunc(formatPayload),
	})
	metrics := root + "/api/metrics"
	bundle, patched := wholeIDs(mon, root)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != root && !strings.HasPrefix(r.URL.Path, root+"/") {
			http.NotFound(w, r)
			return
		}
		if o.ReadOnly && r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "the queue dashboard is read-only", http.StatusMethodNotAllowed)
			return
		}
		if o.PrometheusAddress == "" && r.URL.Path == metrics {
			http.NotFound(w, r) // asynqmon would query an empty address
			return
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("Content-Security-Policy", queuesCSP)
		if patched != nil && r.URL.Path == bundle {
			w.Header().Set("Content-Type", "application/javascript; charset=utf-8")
			_, _ = w.Write(patched)
			return
		}
		mon.ServeHTTP(w, r)
	}), nil
}

// uuidPrefixJS is asynqmon v0.7.2's uuidPrefix (ui/src/utils.ts) as its
// build minified it: the task tables show a task's ID up to its first "-",
// which shortens asynq's UUIDs but cuts Sluice's IDs (a campaign row's
// "sms-3fa8…", an idempotency key "order-100123-shipped") to "sms" and
// "order", so that every task of a campaign showed the same ID.
var uuidPrefixJS = regexp.MustCompile(`function (\w+)\((\w+)\)\{var (\w+)=(\w+)\.indexOf\("-"\);return-1===(\w+)\?(\w+):(\w+)\.substr\(0,(\w+)\)\}`)

// mainBundle finds the UI's main script in asynqmon's index page.
var mainBundle = regexp.MustCompile(`/static/js/main\.[0-9a-f]+\.chunk\.js`)

// wholeIDs returns the path of asynqmon's main UI script under root and
// that script with uuidPrefix showing the whole ID; nil when the script or
// the function is not found as expected (another asynqmon build: its own
// script is served, and TestQueuesShowWholeTaskIDs fails).
func wholeIDs(mon http.Handler, root string) (string, []byte) {
	get := func(path string) []byte {
		rec := httptest.NewRecorder()
		mon.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK {
			return nil
		}
		return rec.Body.Bytes()
	}
	name := mainBundle.Find(get(root + "/"))
	if name == nil {
		return "", nil
	}
	path := root + string(name)
	js := get(path)
	if m := uuidPrefixJS.FindAllSubmatchIndex(js, -1); len(m) != 1 {
		return "", nil
	}
	return path, uuidPrefixJS.ReplaceAll(js, []byte("function ${1}(${2}){return ${2}}"))
}

// queuesCSP confines asynqmon's page to this server: its build loads a
// Google Fonts stylesheet (which would tell Google each time an operator
// opens the dashboard; the page falls back to the system font) and nothing
// else from elsewhere. Its index has inline scripts (its settings, webpack's
// runtime) and Material-UI writes inline styles, hence 'unsafe-inline'
// there; no frame may embed it (its actions could be clickjacked).
const queuesCSP = "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; " +
	"img-src 'self' data:; font-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'self'; " +
	"form-action 'self'; frame-ancestors 'none'"

// redactedValue replaces a credential in a payload the dashboard shows.
const redactedValue = "[redacted]"

// formatPayload is how the queue dashboard shows a task's payload: as
// asynqmon would (its text when printable), except for what may hold
// credentials. A webhook's or HTTP call's url is cut to scheme://host
// (Slack and Discord URLs carry their token in the path, others a ?sig=),
// an http:call's header values and body are replaced with "[redacted]"
// (Authorization, X-Api-Key, an OAuth form), names kept. The other fields
// (recipients, message text, event data) are shown: an operator looking at
// a stuck task needs them. Names match in any case ("URL", "Headers"), as
// encoding/json matches them.
func formatPayload(taskType string, payload []byte) string {
	if taskType != tasks.TypeHTTPCall && taskType != tasks.TypeWebhookDeliver {
		return asynqmon.DefaultPayloadFormatter.FormatPayload(taskType, payload)
	}
	var p map[string]json.RawMessage
	if json.Unmarshal(payload, &p) != nil {
		return "a " + taskType + " payload that is not a JSON object (not shown: it may hold credentials)"
	}
	redacted, _ := json.Marshal(redactedValue)
	// Members are matched by name in any case: encoding/json would decode
	// "URL" or "Headers" into the fields (the worker's decoders refuse
	// them, but a task is shown whatever it holds).
	for name, raw := range p {
		switch {
		case strings.EqualFold(name, "url"):
			var u string
			if json.Unmarshal(raw, &u) == nil {
				p[name], _ = json.Marshal(redact.URL(u))
			} else {
				p[name] = redacted
			}
		case taskType != tasks.TypeHTTPCall:
		case strings.EqualFold(name, "body"):
			p[name] = redacted
		case strings.EqualFold(name, "headers"):
			var headers map[string]json.RawMessage
			if json.Unmarshal(raw, &headers) != nil {
				p[name] = redacted
			} else {
				for k := range headers {
					headers[k] = redacted
				}
				p[name], _ = json.Marshal(headers)
			}
		}
	}
	b, err := json.Marshal(p)
	if err != nil {
		return "a " + taskType + " payload that cannot be shown"
	}
	return string(b)
}

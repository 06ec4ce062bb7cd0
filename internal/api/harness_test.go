package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/dnstest"
	"github.com/sluice-dev/sluice/internal/redistest"
)

func TestMain(m *testing.M) {
	// Target names are resolved at enqueue: the tests' names get a public
	// address, localhost-alias.test loopback, from a DNS in process.
	app.Resolver = dnstest.Resolver(map[string]netip.Addr{"localhost-alias.test": netip.MustParseAddr("127.0.0.1")}, dnstest.Public)
	goleak.VerifyTestMain(m,
		// The limiter's reserve batcher and the delivery store's RecordSent
		// batcher (throttle/coalesce) end a second after their last call;
		// go-redis's pool reaper when its client closes, after the last
		// test's cleanup.
		goleak.IgnoreTopFunction("github.com/sluice-dev/sluice/throttle/coalesce.(*Batcher[...]).run"),
	)
}

// Keys of the tests: 32 bytes each, like `openssl rand -hex 16`.
const (
	adminKey  = "admin-0123456789abcdef0123456789"
	acmeKey   = "acme-00123456789abcdef0123456789"
	globexKey = "globex-23456789abcdef0123456789a"
	keysEnv   = adminKey + ", " + acmeKey + ":acme, " + globexKey + ":globex"
)

// env is an API server over a private redis-server, with the OpenAPI
// document it serves loaded into a kin-openapi router.
type env struct {
	t      testing.TB
	srv    *httptest.Server
	cfg    *config.Config
	rdb    redis.UniversalClient
	insp   *asynq.Inspector
	reg    *prometheus.Registry
	router routers.Router
	doc    *openapi3.T
}

type envOptions struct {
	config     func(*config.Config)
	keys       string // SLUICE_API_KEYS; "" for none
	deliveries api.DeliveryLookup
}

func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	rdb := redistest.Start(t).Client(t)
	cfg := config.Default()
	if o.config != nil {
		o.config(cfg)
	}
	keys, err := api.ParseKeys(o.keys)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	h, err := api.New(api.Options{Config: cfg, Redis: rdb, Keys: keys, Deliveries: o.deliveries, Registerer: reg,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	e := &env{t: t, srv: srv, cfg: cfg, rdb: rdb, insp: asynq.NewInspectorFromRedisClient(rdb), reg: reg}
	e.loadDocument()
	return e
}

// loadDocument fetches /v1/openapi.json from the server, without
// authentication, and validates it as OpenAPI 3.1.
func (e *env) loadDocument() {
	t := e.t
	t.Helper()
	resp, err := e.srv.Client().Get(e.srv.URL + "/v1/openapi.json")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(b)
	require.NoError(t, err)
	require.True(t, doc.IsOpenAPI31OrLater(), "the document is OpenAPI %s", doc.OpenAPI)
	require.NoError(t, doc.Validate(loader.Context))
	require.NotEmpty(t, doc.Servers, "the document names a server")
	doc.Servers = openapi3.Servers{{URL: e.srv.URL}} // this test's server, not the default address
	e.router, err = gorillamux.NewRouter(doc)
	require.NoError(t, err)
	e.doc = doc
}

// reqValid says whether a test's request conforms to the OpenAPI document.
type reqValid bool

const (
	specValid   reqValid = true
	specInvalid reqValid = false // the test sends what the document refuses, on purpose
)

// response is a response the test read.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r response) json(t testing.TB, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(r.Body, v), "body: %s", r.Body)
}

func (r response) problem(t testing.TB) api.Problem {
	t.Helper()
	require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"), "body: %s", r.Body)
	var p api.Problem
	r.json(t, &p)
	require.Equal(t, r.Status, p.Status)
	return p
}

// do sends a request and checks it and its response against the served
// OpenAPI document with kin-openapi: the response always, the request as
// want says (a request the test makes invalid on purpose must be refused by
// the document too, so the document describes what the server refuses).
func (e *env) do(method, path string, body any, header http.Header, want reqValid) response {
	t := e.t
	t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		raw = b
	case string:
		raw = []byte(b)
	default:
		var err error
		raw, err = json.Marshal(b)
		require.NoError(t, err)
	}
	newReq := func() *http.Request {
		var r io.Reader
		if raw != nil {
			r = bytes.NewReader(raw)
		}
		req, err := http.NewRequest(method, e.srv.URL+path, r)
		require.NoError(t, err)
		if raw != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		for k, vs := range header {
			req.Header.Del(k)
			for _, v := range vs {
				req.Header.Add(k, v)
			}
		}
		return req
	}

	req := newReq()
	route, params, err := e.router.FindRoute(req)
	require.NoError(t, err, "%s %s is not in the OpenAPI document", method, path)
	in := &openapi3filter.RequestValidationInput{
		Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: authenticate, MultiError: true},
	}
	reqErr := openapi3filter.ValidateRequest(context.Background(), in)
	if want == specValid {
		require.NoError(t, reqErr, "request refused by the OpenAPI document")
	} else {
		require.Error(t, reqErr, "the OpenAPI document accepts a request the test means to be invalid")
	}

	resp, err := e.srv.Client().Do(newReq())
	require.NoError(t, err)
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	in.Request = newReq() // the validation above read its body
	err = openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(rb)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	})
	require.NoError(t, err, "response %d refused by the OpenAPI document: %s", resp.StatusCode, rb)
	return response{Status: resp.StatusCode, Header: resp.Header, Body: rb}
}

// authenticate is the document's security check as a client sees it: a
// Bearer credential is present (the server decides whether it is valid).
func authenticate(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	h := in.RequestValidationInput.Request.Header.Get("Authorization")
	switch in.SecuritySchemeName {
	case "bearerAuth":
		if tok, ok := strings.CutPrefix(h, "Bearer "); ok && tok != "" {
			return nil
		}
		return errors.New("no Bearer credential")
	}
	return errors.New("scheme not used by the API")
}

func bearer(key string) http.Header {
	return http.Header{"Authorization": {"Bearer " + key}}
}

func withHeader(h http.Header, k, v string) http.Header {
	h = h.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Set(k, v)
	return h
}

// task reads a task from Redis through asynq.
func (e *env) task(queue, id string) *asynq.TaskInfo {
	e.t.Helper()
	info, err := e.insp.GetTaskInfo(queue, id)
	require.NoError(e.t, err)
	return info
}

func payloadOf(t testing.TB, info *asynq.TaskInfo) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(info.Payload, &m))
	return m
}

func mustTime(t testing.TB, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err)
	return v
}

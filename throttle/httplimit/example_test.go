package httplimit_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/throttle"
	"github.com/sluice-dev/sluice/throttle/httplimit"
)

type userKey struct{}

// auth stands for the application's authentication middleware: it puts the
// user of a valid token in the request context.
func auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tok := r.Header.Get("Authorization"); tok == "Bearer alice-token" {
			r = r.WithContext(context.WithValue(r.Context(), userKey{}, "alice"))
		}
		next.ServeHTTP(w, r)
	})
}

// userOf is the middleware's UserFunc: the user auth found, if any.
func userOf(r *http.Request) (string, bool) {
	u, ok := r.Context().Value(userKey{}).(string)
	return u, ok
}

func ExampleMiddleware() {
	// An embedded Redis with a fixed clock keeps the output stable; a
	// service passes its go-redis client and no Clock.
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	now := time.Date(2026, 11, 20, 9, 30, 43, 0, time.UTC)
	lim := throttle.NewRedis(rdb, throttle.Options{Clock: func() time.Time { return now }})

	limiter, err := httplimit.New(lim, httplimit.Config{
		Limits: []throttle.Limit{
			{Name: "minute", Algorithm: throttle.FixedWindow, Rate: throttle.PerMinute(2)},
			{Name: "hour", Algorithm: throttle.FixedWindow, Rate: throttle.PerHour(100)},
		},
		Key:            httplimit.ByUser(userOf), // anonymous: by client IP
		TrustedProxies: []string{"10.0.0.0/8"},   // the load balancers
		Bypass:         func(r *http.Request) bool { return r.URL.Path == "/healthz" },
		Registerer:     prometheus.NewRegistry(), // sluice_httplimit_backend_errors_total
		Timeout:        time.Second,              // default 50ms
	})
	if err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/messages", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "messages for %s\n", httplimit.ClientIP(r))
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	// auth runs first, so the limiter sees the user.
	srv := httptest.NewServer(auth(limiter.Handler(mux)))
	defer srv.Close()

	get := func(path string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer alice-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		fmt.Println(resp.Status)
		for _, k := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit", "Retry-After"} {
			if v := resp.Header.Get(k); v != "" {
				fmt.Printf("%s: %s\n", k, v)
			}
		}
		fmt.Printf("%s\n", body)
	}
	get("/v1/messages")
	get("/v1/messages")
	get("/v1/messages")
	get("/healthz")

	// Output:
	// 200 OK
	// X-RateLimit-Limit: 2
	// X-RateLimit-Remaining: 1
	// X-RateLimit-Reset: 17
	// RateLimit-Policy: "minute";q=2;w=60, "hour";q=100;w=3600
	// RateLimit: "minute";r=1;t=17
	// messages for 127.0.0.1
	//
	// 200 OK
	// X-RateLimit-Limit: 2
	// X-RateLimit-Remaining: 0
	// X-RateLimit-Reset: 17
	// RateLimit-Policy: "minute";q=2;w=60, "hour";q=100;w=3600
	// RateLimit: "minute";r=0;t=17
	// messages for 127.0.0.1
	//
	// 429 Too Many Requests
	// X-RateLimit-Limit: 2
	// X-RateLimit-Remaining: 0
	// X-RateLimit-Reset: 17
	// RateLimit-Policy: "minute";q=2;w=60, "hour";q=100;w=3600
	// RateLimit: "minute";r=0;t=17
	// Retry-After: 17
	// {"error":{"code":"RATE_LIMITED","message":"rate limit exceeded: 2 requests per 1m; retry in 17s","retryAfter":17}}
	// 200 OK
	// ok
}

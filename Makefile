# Sluice — `make test` is the one test command (README, .ci/run).
GO ?= go
REDIS_SERVER := $(shell command -v redis-server 2>/dev/null || ls /usr/bin/redis-server 2>/dev/null)

.PHONY: test test-cluster chaos vet bench bench-scale bench-backlog bench-scripts e2e-full e2e-stress e2e-outage redis-server demo build lint-openapi device-bundle
# `make test` passes on a busy host: its tests assert invariants, not speed.
# The end-to-end tests (internal/e2e, doc.go) assert there that no provider
# cap is exceeded in any 1-second span, WhatsApp pairs are 6s apart, every
# message is delivered exactly once and none is lost, and Sluice's work per
# send; provider throttles only as many as a busy host's late sends explain.
# Speed lower bounds (rate as a fraction of the cap, probe latency, zero
# throttles) are logged there and asserted by `make e2e-full` on an idle
# host, or measured by `make bench`; waits for completion bound a hang, they
# measure nothing. The end-to-end package runs after the others, alone, with
# a timeout that lets its hang bounds fire before go test's.
test: redis-server
	$(GO) vet ./...
	$(GO) test -race -count=1 $$($(GO) list ./... | grep -v /internal/e2e)
	$(GO) test -race -count=1 -timeout 30m ./internal/e2e/

# The limiter's tests (step tables, admin, control) again on a 3-master
# Redis Cluster and through a Sentinel, each started per test beside the
# usual redis-server and miniredis (testutil.Backends), and the three-worker
# end-to-end run on each: about 4 minutes on 2 cores, so not in
# `make test`; CI runs it after it.
test-cluster: redis-server
	SLUICE_TEST_CLUSTER=1 $(GO) test -race -count=1 ./throttle/ ./control/ ./internal/redistest/ ./internal/app/
	SLUICE_TEST_CLUSTER=1 $(GO) test -race -count=1 -timeout 10m -run '^TestThreeWorkersNeverExceedTheCap$$' ./internal/e2e/

vet:
	$(GO) vet ./...

# Lints the API's OpenAPI document with Redocly's recommended rules; it must
# report 0 errors. It needs npx (Node.js) and the npm registry, so `make
# test` does not run it; without npx it says so and does nothing.
# internal/api's tests check the document with kin-openapi offline.
REDOCLY ?= @redocly/cli@2
lint-openapi:
	@if command -v npx >/dev/null 2>&1; then \
	  npx --yes $(REDOCLY) lint --format=stylish internal/api/openapi.json; \
	else \
	  echo "lint-openapi: skipped: npx not found (install Node.js to run Redocly's lint)"; \
	fi

# Installs redis-server from the distribution when missing: integration tests
# start their own private server on a free port, never use a running one.
redis-server:
ifeq ($(REDIS_SERVER),)
	@echo "redis-server not found: installing it with apt-get"
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq redis-server >/dev/null
	@command -v redis-server >/dev/null || ls /usr/bin/redis-server >/dev/null
endif

# Benchmarks, never run by `make test`. The throttle benchmarks compare
# Sluice with go-redis/redis_rate (decisions/s, Redis CPU, memory per key);
# they run more decisions so that the alternating rounds are long enough.
# BenchmarkPlannedSend: Redis µs of plan and reserve per paced WhatsApp send.
# The API benchmarks: requests/s of POST /v1/calls, ms per batch of 1,000.
# Then the many-numbers run (bench-scale, below), whose last line holds the
# ratio lines against plain asynq (redis_cpu_per_send_ratio,
# delivered_rate_ratio), and the backlog scenario at full size (e2e-full,
# about 7 minutes): sends/s, dequeues, limiter calls and Redis CPU per send.
bench: redis-server
	$(GO) test -run '^$$' -bench . -benchtime 5000x -count 1 ./worker/
	$(GO) test -run '^$$' -bench . -benchtime 60000x -count 1 ./throttle/
	$(GO) test -run '^$$' -bench BenchmarkEnqueue -benchtime 3s -count 1 ./internal/api/
	$(MAKE) bench-scale
	$(MAKE) e2e-full

# The end-to-end tests at full size, with their timing asserted: run it on
# an idle host (about 12 minutes). The paced-delivery run: three `sluice
# serve` processes, strict provider emulators, 20,000 WhatsApp sends to one
# number and 2,000 SMS over 20 senders through `sluice send`, then 5,000
# more from a plain asynq client; the tenants run at 4,000 rows a campaign.
# Every test then asserts what `make test` only logs: 0 provider throttles,
# each bottleneck at >= 0.98 of its cap (adaptive: >= 0.9 of the provider's),
# probes within 2s, at most 1.1 limiter calls per send.
e2e-full: redis-server
	SLUICE_E2E_SCALE=full $(GO) test -count=1 -v -timeout 45m ./internal/e2e/

# The stress scenarios of issue 19, never run by `make test`: a busy host
# (3 workers, 2,000 WhatsApp + 2,000 SMS over 40 senders), a 30 s provider
# storm on one number with 2,000 queued, a scope paused 60 s with 1,000
# waiting. Each logs a one-line table of figures (throttles, rates against
# the cap, dequeues per send, recovery times) and, with
# SLUICE_E2E_STRESS_OUT=DIR, writes DIR/<test>.json. They assert invariants
# only (each message once, no cap exceeded); the figures are read on a host
# whose load is known (the issue's acceptance is measured with
# SLUICE_STRESS_BURNERS=2: two CPU-bound processes for the whole run).
# SLUICE_STRESS_SMALL=1 shrinks counts and durations to check the harness;
# SLUICE_STRESS_STORM and SLUICE_STRESS_PAUSE set the storm's halves and the
# pause (internal/e2e/stress_test.go).
e2e-stress: redis-server
	SLUICE_E2E_STRESS=1 $(GO) test -count=1 -v -timeout 60m -run '^TestStress' ./internal/e2e/

# The many-numbers measurement of issue 22, never run by `make test`: 30
# WhatsApp numbers x 300 sends through `sluice send` (one campaign each,
# strict emulator, 80/s a number) and 2 `sluice serve` started after the
# enqueue; then the same sends through plain asynq over HTTP with no limits,
# on a fresh Redis. It logs Redis CPU and INFO commandstats per delivered
# send, delivered/s, each number's rate against its cap, throttles, and the
# ratio lines redis_cpu_per_send_ratio and delivered_rate_ratio (Sluice over
# plain asynq). SLUICE_BENCH_NUMBERS, SLUICE_BENCH_SENDS and
# SLUICE_BENCH_WORKERS set the size; both sides run SLUICE_BENCH_ROUNDS
# times (default 3), alternating, and the ratio line is the rounds' median
# (one pair of runs moves by a fifth on this host); SLUICE_BENCH_SLOWLOG=1 adds Redis' work
# per send script by script (which costs Redis CPU itself), see
# internal/e2e/scale_test.go. Sluice runs with channels.whatsapp.batch_sends
# (batch tasks); SLUICE_BENCH_BATCH=0 runs it without, to compare.
# SLUICE_BENCH_REDIS=cluster runs Sluice's side on a 3-master Redis Cluster
# with spread_by (SLUICE_BENCH_SPREAD=0 without; =1 adds it on one Redis)
# and logs each master's share of the Redis CPU (docs/redis-cluster.md).
# Run it on an idle host.
bench-scale: redis-server
	SLUICE_BENCH_SCALE=1 $(GO) test -count=1 -v -timeout 20m -run '^TestBenchScale$$' ./internal/e2e/

# The backlog memory measurement of issue 22, never run by `make test`:
# 100,000 WhatsApp sends over 30 numbers enqueued through `sluice send` (one
# campaign each, no worker: every send waits, planned), then the same sends
# through a plain asynq client, each on a fresh Redis. It logs INFO memory
# used_memory's growth per waiting send, keys per send, a table of MEMORY
# USAGE by key family (task hashes, queues, limiter plans and backlogs,
# idempotency claims, ...) and the ratio line memory_per_send_ratio (Sluice
# over plain asynq). SLUICE_BENCH_BACKLOG_SENDS and SLUICE_BENCH_NUMBERS set
# the size, see internal/e2e/backlog_mem_test.go. About a minute.
bench-backlog: redis-server
	SLUICE_BENCH_BACKLOG=1 $(GO) test -count=1 -v -timeout 20m -run '^TestBenchBacklogMemory$$' ./internal/e2e/

# The instructions Redis runs inside the plan and reserve scripts per paced
# WhatsApp send (throttle's BenchmarkCampaignScripts: 30 numbers x 300
# sends planned, then reserved 14 a call), never run by `make test`. Redis
# runs under valgrind's callgrind, counting inside scripts only: the count
# is the same on a busy host as on an idle one, so it shows what one change
# to a script does; the µs figures beside it are wall-clock and do not.
# Needs valgrind (apt-get install valgrind); about 3 minutes.
bench-scripts: redis-server
	@command -v valgrind >/dev/null && command -v callgrind_control >/dev/null || { echo "bench-scripts: needs valgrind (apt-get install valgrind)"; exit 1; }
	@d=$$(mktemp -d) && r=$$(command -v redis-server || echo /usr/bin/redis-server) && \
	  printf '#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file=%s/cg.%%p --collect-atstart=no --toggle-collect=luaCallFunction %s "$$@"\n' "$$d" "$$r" > $$d/redis-server && \
	  chmod +x $$d/redis-server && \
	  PATH=$$d:$$PATH SLUICE_CALLGRIND_OUT=$$d $(GO) test -run '^$$' -bench '^Benchmark(Campaign|Record)Scripts$$' -benchtime 1x -count 1 -timeout 30m ./throttle/ ./internal/delivery/; \
	  rc=$$?; rm -rf $$d; exit $$rc

# A bundle of `make bench-scale` for a machine with no Go toolchain and no
# Redis (the 16-core machine some sessions are lent, issue 22): the e2e test
# binary and the sluice binary (static, CGO_ENABLED=0), this machine's
# redis-server with its shared libraries and loader, and
# internal/e2e/device/run-scale.sh, packed as artifacts/device.tgz. There:
# tar xzf device.tgz && device/run-scale.sh OUTDIR (100 numbers x 1,000
# sends, 8 workers unless SLUICE_BENCH_* say otherwise). x86-64 Linux only.
device-bundle: redis-server
	rm -rf artifacts/device artifacts/device.tgz
	mkdir -p artifacts/device/bin artifacts/device/lib artifacts/device/libexec
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o artifacts/device/bin/sluice ./cmd/sluice
	CGO_ENABLED=0 $(GO) test -c -trimpath -ldflags='-s -w' -o artifacts/device/bin/e2e.test ./internal/e2e/
	r=$$(command -v redis-server || echo /usr/bin/redis-server) && cp "$$r" artifacts/device/libexec/redis-server && \
	  for l in $$(ldd "$$r" | grep -o '/[^ ]*'); do cp -L "$$l" artifacts/device/lib/; done
	test -x artifacts/device/lib/ld-linux-x86-64.so.2
	cp internal/e2e/device/redis-server artifacts/device/bin/redis-server
	cp internal/e2e/device/run-scale.sh artifacts/device/run-scale.sh
	tar -C artifacts -czf artifacts/device.tgz device
	@ls -l artifacts/device.tgz

# Redis outages mid-campaign (docs/redis-outages.md), a measurement never
# run by `make test`: two `sluice serve` processes, strict emulators, 1,000
# WhatsApp sends and 500 SMS through `sluice send`, Redis (AOF everysec)
# stopped by SHUTDOWN and by kill -9 for 10, 30 and 60 s; it reports lost and
# duplicate sends and the time taken (about 3 minutes per outage).
# SLUICE_E2E_OUTAGE_MODES=shutdown and SLUICE_E2E_OUTAGE_DOWN=10s pick a subset.
e2e-outage: redis-server
	SLUICE_E2E_OUTAGE=1 $(GO) test -count=1 -v -timeout 60m -run 'TestRedisOutage' ./internal/e2e/

# The chaos suite of issue 23, never run by `make test`: issue 19's campaign
# through one fault each, with real processes (a worker killed, Redis
# restarted and killed, a Sentinel failover, a cluster master lost, a
# 30 s provider storm); each logs enqueued, delivered, duplicates, lost,
# archived with reason and the most in any 1-second span per sender.
# About 14 minutes; SLUICE_CHAOS_SCENARIOS=worker-kill,redis-kill picks some.
chaos: redis-server
	SLUICE_E2E_CHAOS=1 $(GO) test -count=1 -v -timeout 60m -run '^TestChaos$$' ./internal/e2e/

build:
	$(GO) build -buildvcs=auto -o bin/sluice ./cmd/sluice

demo:
	$(GO) run ./cmd/sluice demo

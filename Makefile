# Sluice — `make test` is the one test command (README, .ci/run).
GO ?= go
REDIS_SERVER := $(shell command -v redis-server 2>/dev/null || ls /usr/bin/redis-server 2>/dev/null)

.PHONY: test vet bench e2e-full e2e-outage redis-server demo build
# The end-to-end package runs after the others, alone: its strict emulators
# measure timing, and sharing two cores with the race-enabled unit tests
# made it see jitter that no deployment of Sluice would run under.
test: redis-server
	$(GO) vet ./...
	$(GO) test -race -count=1 $$($(GO) list ./... | grep -v /internal/e2e)
	$(GO) test -race -count=1 ./internal/e2e/

vet:
	$(GO) vet ./...

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
# The API benchmarks: requests/s of POST /v1/calls, ms per batch of 1,000.
# Then the backlog scenario at full size (e2e-full, about 7 minutes): sends/s,
# dequeues, limiter calls and Redis CPU per send.
bench: redis-server
	$(GO) test -run '^$$' -bench . -benchtime 5000x -count 1 ./worker/
	$(GO) test -run '^$$' -bench . -benchtime 60000x -count 1 ./throttle/
	$(GO) test -run '^$$' -bench BenchmarkEnqueue -benchtime 3s -count 1 ./internal/api/
	$(MAKE) e2e-full

# The paced-delivery end-to-end run at full size (about 7 minutes): three
# `sluice serve` processes, strict provider emulators, 20,000 WhatsApp sends
# to one number and 2,000 SMS over 20 senders through `sluice send`, then
# 5,000 more from a plain asynq client. `make test` runs it small.
e2e-full: redis-server
	SLUICE_E2E_SCALE=full $(GO) test -count=1 -v -timeout 30m -run 'TestPacedDeliveryUnderStrictProviders|TestTenantsTakeTurnsOnOneNumber' ./internal/e2e/

# Redis outages mid-campaign (docs/redis-outages.md), a measurement never
# run by `make test`: two `sluice serve` processes, strict emulators, 1,000
# WhatsApp sends and 500 SMS through `sluice send`, Redis (AOF everysec)
# stopped by SHUTDOWN and by kill -9 for 10, 30 and 60 s; it reports lost and
# duplicate sends and the time taken (about 3 minutes per outage).
# SLUICE_E2E_OUTAGE_MODES=shutdown and SLUICE_E2E_OUTAGE_DOWN=10s pick a subset.
e2e-outage: redis-server
	SLUICE_E2E_OUTAGE=1 $(GO) test -count=1 -v -timeout 60m -run 'TestRedisOutage' ./internal/e2e/

build:
	$(GO) build -o bin/sluice ./cmd/sluice

demo:
	$(GO) run ./cmd/sluice demo

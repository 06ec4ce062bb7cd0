# syntax=docker/dockerfile:1
#
# Sluice worker image: a static binary on distroless, running as nonroot.
#   docker build -t sluice .
#   docker run --rm -e REDIS_URL=redis://host:6379/0 -e WHATSAPP_TOKEN=... \
#     -e TWILIO_ACCOUNT_SID=... -e TWILIO_AUTH_TOKEN=... -e WEBHOOK_SECRET=... \
#     -e SLUICE_API_KEYS="$(openssl rand -hex 24)" \
#     -p 9090:9090 sluice
# Mount your own configuration over /etc/sluice/sluice.yaml to change limits.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -o /out/sluice ./cmd/sluice
# The built-in configuration, with one change: sluice.example.yaml serves
# the API, the dashboards, /healthz and /metrics on 127.0.0.1:9090, which
# nothing outside the container can reach, so the image listens on
# 0.0.0.0:9090, and `sluice serve` then requires SLUICE_API_KEYS. The grep
# fails the build if the line in sluice.example.yaml ever changes and the
# sed stops matching.
RUN mkdir -p /out/etc/sluice \
 && sed 's/^  listen: 127\.0\.0\.1:9090$/  listen: 0.0.0.0:9090/' sluice.example.yaml > /out/etc/sluice/sluice.yaml \
 && grep -q '^  listen: 0\.0\.0\.0:9090$' /out/etc/sluice/sluice.yaml

# distroless/static carries CA certificates (HTTPS to graph.facebook.com and
# api.twilio.com) and nothing else: no shell, no package manager.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sluice /sluice
COPY --from=build /out/etc/sluice/sluice.yaml /etc/sluice/sluice.yaml
EXPOSE 9090
ENTRYPOINT ["/sluice"]
CMD ["serve", "--config", "/etc/sluice/sluice.yaml"]

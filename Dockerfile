# syntax=docker/dockerfile:1
# The services of the full stack (docker-compose.yml), one image per target:
#
#   docker build --target secure_app     -t gateway-lab/secure_app .
#   docker build --target production_app -t gateway-lab/production_app .
#   docker build --target mockupstream   -t gateway-lab/mockupstream .
#   docker build --target collector      -t gateway-lab/collector .   # the OpenTelemetry collector + a health probe
#
# Static binaries (CGO_ENABLED=0), run as a non-root user on distroless: no
# shell, no package manager, nothing to exec into but the service itself.
# Each image carries /healthprobe (cmd/healthprobe) for its health check,
# since there is no curl to run one with.

ARG GO_VERSION=1.26
ARG COLLECTOR_VERSION=0.115.0

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-trimpath
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -ldflags="-s -w" -o /out/ ./solutions/secure_app ./solutions/production_app ./cmd/mockupstream ./cmd/healthprobe

FROM gcr.io/distroless/static-debian12:nonroot AS production_app
COPY --from=build /out/production_app /out/healthprobe /
USER nonroot:nonroot
ENV GATEWAY_ADDR=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/production_app"]

FROM gcr.io/distroless/static-debian12:nonroot AS mockupstream
COPY --from=build /out/mockupstream /out/healthprobe /
USER nonroot:nonroot
ENV MOCKUPSTREAM_ADDR=0.0.0.0:8081
EXPOSE 8081
ENTRYPOINT ["/mockupstream"]

FROM otel/opentelemetry-collector-contrib:${COLLECTOR_VERSION} AS collector
COPY --from=build /out/healthprobe /healthprobe

# Last, so a plain `docker build .` builds the service to deploy.
FROM gcr.io/distroless/static-debian12:nonroot AS secure_app
COPY --from=build /out/secure_app /out/healthprobe /
USER nonroot:nonroot
ENV GATEWAY_ADDR=0.0.0.0:8080 GATEWAY_ADMIN_ADDR=0.0.0.0:9464
EXPOSE 8080 9464
ENTRYPOINT ["/secure_app"]

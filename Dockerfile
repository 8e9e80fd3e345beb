# syntax=docker/dockerfile:1
# The cachewatch image: one static binary serving every command (exporter,
# doctor, dashboards, alerts, demo) on a distroless, non-root base.
#
#   docker build -t cachewatch \
#     --build-arg VERSION=$(git describe --tags --always) \
#     --build-arg COMMIT=$(git rev-parse HEAD) \
#     --build-arg DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ) .
#   docker run --rm -p 9643:9643 cachewatch exporter --redis.url redis://host.docker.internal:6379
#
# `cachewatch --version` prints VERSION, COMMIT and DATE. The build stage's
# command is what deploy/image_test.go runs, so keep it on one RUN line.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
ARG DATE=unknown
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags="-s -w -X github.com/prometheus/common/version.Version=${VERSION} -X github.com/prometheus/common/version.Revision=${COMMIT} -X github.com/prometheus/common/version.BuildDate=${DATE}" -o /out/cachewatch ./cmd/cachewatch

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/cachewatch /usr/local/bin/cachewatch
USER 65532:65532
EXPOSE 9643
ENTRYPOINT ["/usr/local/bin/cachewatch"]
CMD ["exporter"]

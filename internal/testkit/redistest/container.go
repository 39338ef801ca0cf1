//go:build testcontainers

package redistest

import (
	"context"
	"fmt"

	"github.com/testcontainers/testcontainers-go"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
)

// containerImage is the Redis image started when Docker is the only way.
const containerImage = "redis:7-alpine"

// startContainer starts Redis with testcontainers-go when a Docker engine
// answers. It is built only with -tags testcontainers, so the default build
// never compiles testcontainers and the Docker client (most of a cold
// `go test`'s compile time otherwise). testcontainers panics on some broken Docker set-ups; that is
// turned into an error so the caller can skip or fail cleanly.
func startContainer(ctx context.Context) (url string, stop func(), err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("docker unavailable: %v", r)
		}
	}()
	provider, err := testcontainers.ProviderDefault.GetProvider()
	if err != nil {
		return "", nil, fmt.Errorf("docker unavailable: %w", err)
	}
	defer provider.Close()
	if err := provider.Health(ctx); err != nil {
		return "", nil, fmt.Errorf("docker unavailable: %w", err)
	}
	c, err := tcredis.Run(ctx, containerImage)
	if err != nil {
		return "", nil, fmt.Errorf("start %s: %w", containerImage, err)
	}
	url, err = c.ConnectionString(ctx)
	if err != nil {
		_ = testcontainers.TerminateContainer(c)
		return "", nil, err
	}
	return url, func() { _ = testcontainers.TerminateContainer(c) }, nil
}

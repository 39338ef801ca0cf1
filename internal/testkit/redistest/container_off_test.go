//go:build !testcontainers

package redistest

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestDefaultBuildSaysHowToTryDocker(t *testing.T) {
	rec := findWith(&finder{getenv: env(nil), lookPath: noServer, docker: startContainer})
	assert.True(t, rec.skipped, "no REDIS_URL, no redis-server and no Docker build: skip")
	assert.Contains(t, rec.msg, "-tags testcontainers", "the skip must say how to enable the Docker path")
}

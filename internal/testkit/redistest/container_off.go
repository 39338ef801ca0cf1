//go:build !testcontainers

package redistest

import (
	"context"
	"errors"
)

// errNoContainers says how to get the Docker path: the default build leaves
// testcontainers out (it and the Docker client are the largest dependencies
// of a test build).
var errNoContainers = errors.New("testcontainers left out of this build (-tags testcontainers adds it)")

func startContainer(context.Context) (string, func(), error) { return "", nil, errNoContainers }

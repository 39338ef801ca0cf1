// Package spec reads the one-line provider specs the command line takes:
// comma-separated key=value fields, e.g. "name=alpha,latency=80ms".
package spec

import (
	"errors"
	"fmt"
	"strings"
)

// ErrSyntax is wrapped by errors about the spec's shape, not its values.
var ErrSyntax = errors.New("spec: want comma-separated key=value fields")

// Each calls set for every key=value field of s, in order. An error from set
// is returned wrapped with the field it was about.
func Each(s string, set func(key, value string) error) error {
	for _, field := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(field), "=")
		if !ok {
			return fmt.Errorf("%w: %q", ErrSyntax, field)
		}
		if err := set(k, v); err != nil {
			return fmt.Errorf("%s=%s: %w", k, v, err)
		}
	}
	return nil
}

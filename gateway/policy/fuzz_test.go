package policy_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/production-go/gateway-lab/gateway/policy"
	"github.com/stretchr/testify/require"
)

// FuzzParse feeds arbitrary bytes to Parse as YAML or JSON. Parse must not
// panic; an error must match ErrInvalid and each *Error in it must name the
// file; a policy it accepts must satisfy every rule the loader promises.
// The committed corpus (testdata/fuzz/FuzzParse) holds the default policy
// in both formats and near misses.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"tiers.yaml", "tiers.json"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		require.NoError(f, err)
		f.Add(data, strings.HasSuffix(name, ".yaml"))
	}
	f.Add([]byte(baseYAML), true)
	f.Add([]byte(baseJSON), false)
	f.Fuzz(func(t *testing.T, data []byte, asYAML bool) {
		format := "json"
		if asYAML {
			format = "yaml"
		}
		p, err := policy.Parse("f", data, format)
		if err != nil {
			require.Nil(t, p)
			require.ErrorIs(t, err, policy.ErrInvalid)
			var pe *policy.Error
			require.True(t, errors.As(err, &pe), "errors.As finds a *policy.Error in %q", err)
			require.Equal(t, "f", pe.File)
			require.True(t, strings.HasPrefix(err.Error(), "f:"), "the text starts with the file name: %q", err)
			return
		}
		names := p.Names()
		require.NotEmpty(t, names, "an accepted policy has tiers")
		for _, name := range names {
			tier, ok := p.Tier(name)
			require.True(t, ok)
			require.Equal(t, name, tier.Name)
			require.Greater(t, tier.RatePerSecond, 0.0)
			require.GreaterOrEqual(t, tier.Burst, 1)
			require.GreaterOrEqual(t, tier.MaxInFlight, 1)
			require.GreaterOrEqual(t, tier.MaxPromptBytes, 1)
			require.NotEmpty(t, tier.Models)
			require.Positive(t, tier.MaxRequestTimeout)
			require.GreaterOrEqual(t, tier.TokensPerMinute, 0)
		}
	})
}

package interview

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEstimatesRecomputeEveryFigureFromTheOnesAbove(t *testing.T) {
	text := "Prose.\n\n```estimate\n" +
		"# a comment line\n" +
		"peak_rps     = 2_000              # chat requests a second\n" +
		"tokens       = 600 + 300\n" +
		"tokens_per_s = peak_rps * tokens  ≈ \"1.8 M tokens a second\"\n" +
		"tpm          = tokens_per_s * 60  ≈ \"108 M TPM\"  # what the provider counts\n" +
		"slots        = peak_rps * 4 / 0.75 ≈ \"10,700 slots\"\n" +
		"replicas     = ceil(slots / 1000) + 2 ≈ \"13 replicas\"\n" +
		"slow         = 1 - pow(0.99, 100) ≈ \"63 %\"\n" +
		"money        = tpm / 1e6 * 3      ≈ \"$324 a minute\"\n" +
		"biggest      = max(1, tokens, 3) / min(2, 4)\n" +
		"```\n"
	es, err := Estimates(text)
	require.NoError(t, err)
	require.Len(t, es, 1)
	assert.Equal(t, 3, es[0].Line)
	f := es[0].Figures
	require.Len(t, f, 9)
	assert.Equal(t, "peak_rps", f[0].Name)
	assert.InDelta(t, 2000, f[0].Value, 0)
	assert.InDelta(t, 1.08e8, f[3].Value, 1)
	assert.Equal(t, "108 M TPM", f[3].Shown)
	assert.InDelta(t, 13, f[5].Value, 0)
	assert.InDelta(t, 450, f[8].Value, 0)
}

func TestEstimatesRefuseAFigureTheProseMisquotes(t *testing.T) {
	cases := map[string]struct{ line, want string }{
		"too far from the quote": {`x = 10667 ≈ "10,600 slots"`, "computes to 10667"},
		"a decimal quote":        {`x = 1.86e6 ≈ "1.8 M"`, "computes to"},
		"a percentage":           {`x = 0.634 ≈ "62 %"`, "computes to"},
		"a quote with no number": {`x = 1 ≈ "about one"`, "does not start with a number"},
		"an unquoted quote":      {`x = 1 ≈ 1`, "double quotes"},
		"a name used before set": {`x = y + 1`, "y is not defined above"},
		"a name set twice":       {"x = 1\nx = 2", "defined twice"},
		"not a definition":       {`x + 1`, "is not `name = expression`"},
		"a bad expression":       {`x = 1 +`, "does not parse"},
		"not arithmetic":         {`x = 1 % 2`, "not arithmetic"},
		"a string":               {`x = "1"`, "not a number"},
		"division by zero":       {`x = 1 / 0`, "division by zero"},
		"an unknown function":    {`x = exp(1)`, "no function exp"},
		"the wrong arity":        {`x = pow(2)`, "takes 2 arguments"},
		"no number comes out":    {`x = sqrt(0 - 1)`, "is not a number"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Estimates("```estimate\n" + c.line + "\n```\n")
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
	_, err := Estimates("```estimate\nx = 1\n")
	assert.ErrorContains(t, err, "never closed")
	_, err = Estimates("```estimate\n```\n")
	assert.ErrorContains(t, err, "empty")
}

func TestAQuoteHoldsItsValueToThePrecisionItIsWrittenWith(t *testing.T) {
	ok := map[string]float64{
		"10,700":         10_667,
		"1.8 M":          1_830_000,
		"108 M TPM":      108_400_000,
		"$373,000 a day": 373_248,
		"720 Mbit/s":     720.2, // M before bit is a unit, not a million
		"45 KB":          45.1,
		"−44 %":          -0.4376,
		"0.0054":         0.00544,
		"2 bn":           2.2e9,
		"0":              0.4,
		"~5 k":           5_400,
	}
	for shown, v := range ok {
		assert.NoError(t, Matches(shown, v), shown)
	}
	bad := map[string]float64{
		"10,700":     10_760,
		"1.8 M":      1_860_000,
		"720 Mbit/s": 7.2e8,
		"44 %":       -0.44,
		"0":          0.6,
	}
	for shown, v := range bad {
		assert.Error(t, Matches(shown, v), shown)
	}
}

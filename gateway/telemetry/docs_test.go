package telemetry_test

import (
	"context"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/gateway/router"
	"github.com/production-go/gateway-lab/gateway/telemetry"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// describer is a Registerer that keeps the name of every metric registered
// with it: what the gateway can export, whether or not a series exists yet.
type describer struct{ names map[string]bool }

var fqName = regexp.MustCompile(`fqName: "([a-z_]+)"`)

func (d *describer) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for desc := range ch {
		if m := fqName.FindStringSubmatch(desc.String()); m != nil {
			d.names[m[1]] = true
		}
	}
	return nil
}

func (d *describer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = d.Register(c)
	}
}

func (d *describer) Unregister(prometheus.Collector) bool { return false }

type oneLimit struct{}

func (oneLimit) Name() string { return "up" }
func (oneLimit) Limit() int   { return 1 }

// TestTheMetricsTableListsEveryMetricAndNoOther reads docs/architecture.md's
// metrics table against what the code registers: every metric the gateway
// and secure_app can export is in the table, and every name in it exists.
func TestTheMetricsTableListsEveryMetricAndNoOther(t *testing.T) {
	d := &describer{names: map[string]bool{}}
	m := telemetry.New(d)
	r, err := router.New(router.Config{
		Slots:  router.Slots{MaxConcurrent: 1},
		Retry:  router.Retry{MaxAttempts: 1, AttemptTimeout: time.Second, TotalTimeout: time.Second},
		Health: router.Health{FailureThreshold: 1, RecoveryTimeout: time.Second},
	}, failing{"up"})
	require.NoError(t, err)
	defer func() { require.NoError(t, r.Close(context.Background())) }()
	m.WatchRouter(r)
	m.WatchHedging([]string{"up"}, true, true)
	m.WatchLimits([]telemetry.Limited{oneLimit{}})
	telemetry.NewGuard(false).Register(d)
	var code []string
	for n := range d.names {
		code = append(code, n)
	}
	sort.Strings(code)

	doc, err := os.ReadFile("../../docs/architecture.md")
	require.NoError(t, err)
	section := string(doc)
	section = section[strings.Index(section, "## Metrics (`/metrics`)"):]
	var table []string
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `gateway_") {
			continue
		}
		first := strings.SplitN(line, "|", 3)[1] // the metric column: one name or several
		for _, n := range regexp.MustCompile("`(gateway_[a-z_]+)`").FindAllStringSubmatch(first, -1) {
			table = append(table, n[1])
		}
	}
	sort.Strings(table)
	require.NotEmpty(t, code)
	for _, n := range code {
		assert.True(t, slices.Contains(table, n), "%s is exported but missing from docs/architecture.md's metrics table", n)
	}
	for _, n := range table {
		assert.True(t, d.names[n], "docs/architecture.md lists %s, which nothing exports", n)
	}
}

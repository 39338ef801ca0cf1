// Package promtest reads metrics back from a Prometheus registry in tests.
package promtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// Counter is the value of the series of counter name whose labels include
// the given name, value pairs; 0 when no such series exists yet.
func Counter(t testing.TB, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	m := find(t, reg, name, labels)
	if m == nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// Has reports whether a series of metric name whose labels include the
// given name, value pairs exists (at zero, say, before any increment).
func Has(t testing.TB, reg prometheus.Gatherer, name string, labels ...string) bool {
	t.Helper()
	return find(t, reg, name, labels) != nil
}

// find is the first series of metric name with the given labels, or nil.
func find(t testing.TB, reg prometheus.Gatherer, name string, labels []string) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue next
				}
			}
			return m
		}
	}
	return nil
}

package promtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCounterReadsTheSeriesWithTheGivenLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"a", "b"})
	reg.MustRegister(c)
	c.WithLabelValues("1", "2").Add(3)
	c.WithLabelValues("1", "3").Add(5)
	assert.Equal(t, 3.0, Counter(t, reg, "x_total", "b", "2", "a", "1"), "labels in any order")
	assert.Equal(t, 5.0, Counter(t, reg, "x_total", "b", "3"))
	assert.Zero(t, Counter(t, reg, "x_total", "b", "4"), "no such series: 0")
	assert.Zero(t, Counter(t, reg, "y_total"), "no such metric: 0")
}

func TestHasSeesASeriesAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"a"})
	reg.MustRegister(c)
	c.WithLabelValues("1")
	assert.True(t, Has(t, reg, "x_total", "a", "1"), "a series made and never incremented exists")
	assert.False(t, Has(t, reg, "x_total", "a", "2"))
}

package node

import (
	"context"
	"github.com/redlocklab/redlocklab/infra/fault"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// What the lab did to a node, for Prometheus: each supervisor serves
// /metrics on its control endpoint, so that dashboards can shade fault
// periods and alerts can tell a crash restart from a clean one. Every
// metric carries the node's number (from 1) as "node"; the scrape
// configuration must not add one.

// FaultKinds lists every fault a supervisor can inject, in the catalogue's
// order: the kinds a process node takes, less those that only end another
// (start, heal).
func FaultKinds() []FaultKind {
	healers := map[FaultKind]bool{}
	for _, d := range fault.Defs() {
		if d.HealedBy != "" {
			healers[d.HealedBy] = true
		}
	}
	var out []FaultKind
	for _, d := range fault.Defs() {
		if d.Can(fault.ProcessNode) && !healers[d.Kind] {
			out = append(out, d.Kind)
		}
	}
	return out
}

var nodeStates = []State{Starting, Waiting, Up, Paused, Stopped}

// The supervisors' metric names.
const (
	metricFaultActive  = "redlab_lab_fault_active"
	metricNodeState    = "redlab_lab_node_state"
	metricRestarts     = "redlab_lab_node_restarts_total"
	metricRestartDelay = "redlab_lab_node_restart_delay_seconds"
	metricDowntime     = "redlab_lab_node_crash_downtime_seconds"
	metricClockOffset  = "redlab_lab_node_clock_offset_seconds"
)

// MetricNames lists the metrics every supervisor serves on its control
// endpoint's /metrics.
func MetricNames() []string {
	return []string{metricFaultActive, metricNodeState, metricRestarts, metricRestartDelay, metricDowntime, metricClockOffset}
}

var (
	descFaultActive = prometheus.NewDesc(metricFaultActive,
		"1 while a fault of this kind is in effect on the node (a kill lasts until the node answers again), else 0.",
		[]string{"node", "fault"}, nil)
	descNodeState = prometheus.NewDesc(metricNodeState,
		"1 for the node's current state as its supervisor sees it (starting, waiting: held by the restart guard, up, paused, stopped), 0 for the others.",
		[]string{"node", "state"}, nil)
	descRestarts = prometheus.NewDesc(metricRestarts,
		"Times redis-server died unasked (a crash, a kill, a power loss) and the supervisor restarted it through the restart guard.",
		[]string{"node"}, nil)
	descRestartDelay = prometheus.NewDesc(metricRestartDelay,
		"The restart guard's delay after a crash, as configured (0: crashed nodes restart at once).",
		[]string{"node"}, nil)
	descDowntime = prometheus.NewDesc(metricDowntime,
		"How long the node's last crash kept it from answering: from redis-server's death to its first PING after the restart. Absent before the first crash.",
		[]string{"node"}, nil)
	descClockOffset = prometheus.NewDesc(metricClockOffset,
		"The node's TIME minus the supervisor's clock at the middle of the round trip (as redlab doctor measures it). Absent while the node does not answer.",
		[]string{"node"}, nil)
)

// nodeCollector reads the supervisor's state at every scrape.
type nodeCollector struct{ s *supervisor }

var _ prometheus.Collector = nodeCollector{}

func (c nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descFaultActive, descNodeState, descRestarts, descRestartDelay, descDowntime, descClockOffset} {
		ch <- d
	}
}

func (c nodeCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	node := strconv.Itoa(s.spec.ID)
	st := s.status()
	s.mu.Lock()
	downtime := s.lastDowntime
	s.mu.Unlock()
	for _, k := range FaultKinds() {
		v := 0.0
		if st.Active[k] != "" {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descFaultActive, prometheus.GaugeValue, v, node, string(k))
	}
	for _, state := range nodeStates {
		v := 0.0
		if st.State == state {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descNodeState, prometheus.GaugeValue, v, node, string(state))
	}
	ch <- prometheus.MustNewConstMetric(descRestarts, prometheus.CounterValue, float64(st.Restarts), node)
	ch <- prometheus.MustNewConstMetric(descRestartDelay, prometheus.GaugeValue, time.Duration(s.spec.RestartDelay).Seconds(), node)
	if downtime > 0 {
		ch <- prometheus.MustNewConstMetric(descDowntime, prometheus.GaugeValue, downtime.Seconds(), node)
	}
	if st.State == Up {
		if off, ok := s.clockOffset(); ok {
			ch <- prometheus.MustNewConstMetric(descClockOffset, prometheus.GaugeValue, off.Seconds(), node)
		}
	}
}

// clockOffset asks the node for its TIME on the private port, briefly: a
// scrape must not hang on a node that stopped answering.
func (s *supervisor) clockOffset() (time.Duration, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	before := time.Now()
	t, err := s.direct.Time(ctx).Result()
	if err != nil {
		return 0, false
	}
	rtt := time.Since(before)
	return t.Sub(before.Add(rtt / 2)), true
}

// metricsHandler serves the node's metrics on a registry of its own.
func (s *supervisor) metricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(nodeCollector{s})
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

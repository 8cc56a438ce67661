package node_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/internal/faultcheck"
)

// scrape reads a /metrics endpoint into its families, and fails the test
// on anything promlint finds in them.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.New(bytes.NewReader(b)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// sample returns the value of the series of name whose labels include
// want, and whether there is one.
func sample(mfs map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
	for _, m := range mf.GetMetric() {
		n := 0
		for _, lp := range m.GetLabel() {
			if v, ok := want[lp.GetName()]; ok && v == lp.GetValue() {
				n++
			}
		}
		if n != len(want) {
			continue
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// TestNodeMetrics: the supervisor's /metrics follows a kill from the fault
// to the restart, and measures the downtime the restart guard imposed.
func TestNodeMetrics(t *testing.T) {
	l := runTestSupervisor(t, prepareTestNode(t))
	ctl := l.control().Addr
	mfs := scrape(t, ctl)
	for _, k := range node.FaultKinds() {
		if v, ok := sample(mfs, "redlab_lab_fault_active", map[string]string{"node": "1", "fault": string(k)}); !ok || v != 0 {
			t.Errorf("fault_active{%s} before any fault: got %v (present %v), want 0", k, v, ok)
		}
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"redlab_lab_node_state", map[string]string{"node": "1", "state": "up"}, 1},
		{"redlab_lab_node_state", map[string]string{"node": "1", "state": "waiting"}, 0},
		{"redlab_lab_node_restarts_total", map[string]string{"node": "1"}, 0},
		{"redlab_lab_node_restart_delay_seconds", map[string]string{"node": "1"}, faultcheck.GuardDelay.Seconds()},
	} {
		if v, ok := sample(mfs, tc.name, tc.labels); !ok || v != tc.want {
			t.Errorf("%s%v: got %v (present %v), want %v", tc.name, tc.labels, v, ok, tc.want)
		}
	}
	if _, ok := sample(mfs, "redlab_lab_node_crash_downtime_seconds", nil); ok {
		t.Error("crash downtime before any crash: want absent")
	}
	if _, ok := sample(mfs, "redlab_lab_node_clock_offset_seconds", map[string]string{"node": "1"}); !ok {
		t.Error("clock offset of a node that answers: want present")
	}

	ctx := context.Background()
	if _, err := l.Kill(ctx, 1); err != nil {
		t.Fatal(err)
	}
	mfs = scrape(t, ctl)
	if v, _ := sample(mfs, "redlab_lab_fault_active", map[string]string{"fault": "kill"}); v != 1 {
		t.Errorf("fault_active{kill} right after the kill: got %v, want 1", v)
	}
	if v, _ := sample(mfs, "redlab_lab_node_state", map[string]string{"state": "up"}); v != 0 {
		t.Errorf("state up right after the kill: got %v, want 0", v)
	}
	faultcheck.Eventually(t, 20*time.Second, "node up again", func() error {
		if st := faultcheck.Status(t, l, 1); st.State != node.Up {
			return fmt.Errorf("state %s", st.State)
		}
		return nil
	})
	mfs = scrape(t, ctl)
	if v, _ := sample(mfs, "redlab_lab_fault_active", map[string]string{"fault": "kill"}); v != 0 {
		t.Errorf("fault_active{kill} once the node answers: got %v, want 0", v)
	}
	if v, _ := sample(mfs, "redlab_lab_node_restarts_total", nil); v != 1 {
		t.Errorf("restarts after one kill: got %v, want 1", v)
	}
	// The guard held the restart for its delay: the downtime cannot be
	// shorter (a lower bound set by the guard's sleep, not a timing).
	if v, ok := sample(mfs, "redlab_lab_node_crash_downtime_seconds", nil); !ok || v < faultcheck.GuardDelay.Seconds() {
		t.Errorf("crash downtime: got %v (present %v), want at least the guard's %v", v, ok, faultcheck.GuardDelay)
	}
}

// TestFaultKindsFromTheCatalogue: the kinds a supervisor reports are the
// catalogue's process-node faults, without start and heal, which only end
// one.
func TestFaultKindsFromTheCatalogue(t *testing.T) {
	want := []node.FaultKind{fault.Kill, fault.PowerLoss, fault.Restart, fault.Stop, fault.Pause,
		fault.Partition, fault.Latency, fault.ClockJump, fault.ClockRate, fault.Failover}
	if got := node.FaultKinds(); !slices.Equal(got, want) {
		t.Errorf("FaultKinds: got %v, want %v", got, want)
	}
}

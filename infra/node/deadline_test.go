package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/internal/atomicfile"
	"github.com/redlocklab/redlocklab/internal/faultcheck"
)

// TestSupervisorEndsFaultsAtTheirFor: a partition and a latency given a
// `for` end on the supervisor, with nobody sending a heal; a heal cancels
// the timer, so it does not end a later partition without `for`.
func TestSupervisorEndsFaultsAtTheirFor(t *testing.T) {
	spec := prepareTestNode(t)
	l := runTestSupervisor(t, spec)
	ctx := context.Background()
	timeout := 300 * time.Millisecond

	res, err := l.apply(ctx, fault.Partition, fault.Params{fault.For: {D: 500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ID == "" || res.Params["for"] != "500ms" {
		t.Fatalf("partition for 500ms: fault %+v, want one recorded with for 500ms", res.Result)
	}
	if st := faultcheck.Status(t, l, 1); !st.Partitioned || st.Until[fault.Partition].IsZero() {
		t.Fatalf("partition for 500ms: status %+v, want partitioned with a deadline", st)
	}
	faultcheck.FaultEnded(t, l, res.ID, map[string]string{"ended_by": "for"})
	faultcheck.Eventually(t, 5*time.Second, "node answers once the partition's for passed", func() error {
		return faultcheck.Ping(t, l, 1, timeout)
	})
	if st := faultcheck.Status(t, l, 1); st.Partitioned || len(st.Until) != 0 || st.Active[fault.Partition] != "" {
		t.Errorf("after the partition's for: status %+v, want no partition and no deadline", st)
	}

	res, err = l.apply(ctx, fault.Latency, fault.Params{"add": {D: 50 * time.Millisecond}, fault.For: {D: 500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	faultcheck.FaultEnded(t, l, res.ID, map[string]string{"ended_by": "for", "for": "500ms"})
	if st := faultcheck.Status(t, l, 1); st.Latency != 0 || len(st.Until) != 0 {
		t.Errorf("after the latency's for: status %+v, want no latency", st)
	}

	// A heal before the `for` ends the timer with the fault.
	if _, err := l.apply(ctx, fault.Partition, fault.Params{fault.For: {D: 700 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	if err := l.Heal(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := l.Partition(ctx, 1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1200 * time.Millisecond) // past the healed partition's for
	if st := faultcheck.Status(t, l, 1); !st.Partitioned {
		t.Errorf("a partition without for, after a healed one's for passed: status %+v, want still partitioned", st)
	}
	if err := faultcheck.Ping(t, l, 1, timeout); err == nil || !faultcheck.IsTimeout(err) {
		t.Errorf("partitioned node: got %v, want a client timeout", err)
	}
	if err := l.Heal(ctx, 1); err != nil {
		t.Fatal(err)
	}
}

// TestSupervisorRestartDoesNotResurrectExpiredFault: a status left by a
// supervisor that died during a partition whose `for` has since passed
// brings no partition back; one whose `for` has not passed holds the
// partition for what is left of it, and then ends it.
func TestSupervisorRestartDoesNotResurrectExpiredFault(t *testing.T) {
	for _, tc := range []struct {
		name  string
		until time.Duration // from now
	}{
		{"expired", -time.Second},
		{"pending", 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := prepareTestNode(t)
			until := time.Now().Add(tc.until)
			st := node.Status{DaemonStatus: node.DaemonStatus{
				ID: spec.ID, State: node.Up, Partitioned: true,
				Active: map[node.FaultKind]string{fault.Partition: "n1-partition-1-1"},
				Until:  map[node.FaultKind]time.Time{fault.Partition: until},
			}}
			if err := atomicfile.WriteJSON(spec.Path(node.StatusFile), st, 0o644); err != nil {
				t.Fatal(err)
			}
			// The start waits until the node answers through its front,
			// so it returns only once the restored partition has ended.
			l := runTestSupervisor(t, spec)
			if tc.until > 0 && time.Now().Before(until) {
				t.Errorf("node answered through its front %v before its restored partition's for ended", time.Until(until))
			}
			if got := faultcheck.Status(t, l, 1); got.Partitioned || len(got.Until) != 0 || got.Active[fault.Partition] != "" {
				t.Errorf("restored status %+v: want no partition, no deadline", got)
			}
			if err := faultcheck.Ping(t, l, 1, 300*time.Millisecond); err != nil {
				t.Errorf("PING after the restored partition: %v", err)
			}
		})
	}
}

package redlockprom_test

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/redlocklab/redlocklab/redlock"
	"github.com/redlocklab/redlocklab/redlock/redlockprom"
)

func Example() {
	reg := prometheus.NewRegistry()
	m, err := redlockprom.New(reg)
	if err != nil {
		panic(err)
	}
	// In a program: redlock.New(nodes, redlock.WithObserver(m.Observer())).
	// Here one attempt is handed to the Observer directly.
	o := m.Observer()
	o.Observe(redlock.Event{
		Op: redlock.OpAcquire, Attempt: 1, Quorum: 2, Votes: 2, TTL: 10 * time.Second, Validity: 9890 * time.Millisecond,
		Nodes: []redlock.NodeResult{
			{Node: 0, Outcome: redlock.Granted, Latency: 800 * time.Microsecond},
			{Node: 1, Outcome: redlock.Granted, Latency: 900 * time.Microsecond},
			{Node: 2, Outcome: redlock.Abandoned, Latency: 900 * time.Microsecond},
		},
	})
	n, err := testutil.GatherAndCount(reg, "redlock_node_request_duration_seconds")
	if err != nil {
		panic(err)
	}
	fmt.Println("node series:", n)
	// Every result of an attempt is there from the start (at 0 until seen).
	fmt.Println("attempt result series:", testutil.CollectAndCount(reg, "redlock_attempts_total"))
	// Output:
	// node series: 3
	// attempt result series: 8
}

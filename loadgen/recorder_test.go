package loadgen

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

func TestRecorderMergesShards(t *testing.T) {
	const workers, perWorker = 8, 2000
	rec := NewRecorder(3, 4)
	want := NewHistSet(3)
	var wantMu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWorker; i++ {
				s := Sample{
					Outcome:        Outcome(i % int(Late)),
					E2E:            time.Duration(w*1000+i) * time.Microsecond,
					E2EUncorrected: time.Duration(i) * time.Microsecond,
					LateStart:      i%100 == 0,
					Lock:           true,
					Acquire:        time.Duration(i%50) * time.Millisecond,
					Hold:           time.Millisecond,
					Release:        time.Duration(w) * time.Microsecond,
					Attempts:       1 + i%3,
				}
				rec.Record(w, s)
				nodes := []NodeResult{{0, NodeGranted, time.Duration(i) * time.Microsecond}, {2, NodeAbandoned, 0}}
				rec.RecordNodes(nodes)
				wantMu.Lock()
				want.Outcomes[s.Outcome]++
				want.recordLatency(want.E2E, s.E2E)
				want.recordLatency(want.E2EUncorrected, s.E2EUncorrected)
				want.recordLatency(want.Acquire, s.Acquire)
				want.recordLatency(want.Hold, s.Hold)
				want.recordLatency(want.Release, s.Release)
				_ = want.Attempts.RecordValue(int64(s.Attempts))
				if s.LateStart {
					want.LateStarts++
				}
				want.recordLatency(want.Nodes[0], nodes[0].Latency)
				want.NodeOutcomes[0][NodeGranted]++
				want.NodeOutcomes[2][NodeAbandoned]++
				wantMu.Unlock()
			}
		}()
	}
	// A collector running while the workers record must lose nothing.
	got := NewHistSet(3)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 20; i++ {
			rec.Collect(got)
			time.Sleep(time.Millisecond)
		}
	}()
	wg.Wait()
	<-done
	rec.Collect(got)
	rec.RecordLate(5)
	rec.Collect(got)
	want.Outcomes[Late]++

	for i, tg := range got.Tagged() {
		wh := want.Tagged()[i].Hist
		if !tg.Hist.Equals(wh) {
			t.Errorf("%s: merged histogram differs: got count %d p99 %d, want count %d p99 %d",
				tg.Tag, tg.Hist.TotalCount(), tg.Hist.ValueAtQuantile(99), wh.TotalCount(), wh.ValueAtQuantile(99))
		}
	}
	if got.Outcomes != want.Outcomes {
		t.Errorf("outcomes: got %v, want %v", got.Outcomes, want.Outcomes)
	}
	if got.LateStarts != want.LateStarts {
		t.Errorf("late starts: got %d, want %d", got.LateStarts, want.LateStarts)
	}
	for i := range want.NodeOutcomes {
		if got.NodeOutcomes[i] != want.NodeOutcomes[i] {
			t.Errorf("node %d outcomes: got %v, want %v", i, got.NodeOutcomes[i], want.NodeOutcomes[i])
		}
	}
	if n := got.Requests(); n != workers*perWorker+1 {
		t.Errorf("requests: got %d, want %d", n, workers*perWorker+1)
	}
	// Everything was moved out: a further Collect adds nothing.
	empty := NewHistSet(3)
	rec.Collect(empty)
	if empty.Requests() != 0 || empty.E2E.TotalCount() != 0 || empty.Nodes[0].TotalCount() != 0 {
		t.Errorf("second collect: got %d requests, want 0", empty.Requests())
	}
}

func TestRecorderClampsOutOfRange(t *testing.T) {
	rec := NewRecorder(0, 1)
	rec.Record(0, Sample{Outcome: Error, E2E: time.Hour, E2EUncorrected: -time.Second})
	got := NewHistSet(0)
	rec.Collect(got)
	if got.Clamped != 1 {
		t.Errorf("clamped: got %d, want 1", got.Clamped)
	}
	if max := got.E2E.Max(); max < latencyHighest {
		t.Errorf("e2e max: got %d, want >= %d", max, latencyHighest)
	}
	if got.E2EUncorrected.TotalCount() != 1 || got.E2EUncorrected.Max() > int64(time.Microsecond) {
		t.Errorf("negative latency: got count %d max %d, want it recorded as 0",
			got.E2EUncorrected.TotalCount(), got.E2EUncorrected.Max())
	}
}

func TestHistSetMergeGrowsNodes(t *testing.T) {
	a, b := NewHistSet(1), NewHistSet(3)
	_ = b.Nodes[2].RecordValue(5000)
	b.NodeOutcomes[2][NodeTimeout] = 4
	a.Merge(b)
	if len(a.Nodes) != 3 || a.Nodes[2].TotalCount() != 1 || a.NodeOutcomes[2][NodeTimeout] != 4 {
		t.Errorf("got %d nodes, node2 count %d timeouts %d; want 3, 1, 4", len(a.Nodes), a.Nodes[2].TotalCount(), a.NodeOutcomes[2][NodeTimeout])
	}
}

func TestNodeTagsNumberFromOne(t *testing.T) {
	for i := range 12 {
		tag := NodeTag(i)
		if want := "node" + strconv.Itoa(i+1); tag != want {
			t.Errorf("NodeTag(%d) = %q, want %q", i, tag, want)
		}
		if got, ok := nodeIndex(tag); !ok || got != i {
			t.Errorf("nodeIndex(%q) = %d, %v; want %d", tag, got, ok, i)
		}
	}
	for _, tag := range []string{"node0", "node", "node-1", "node+1", "node01", "node1025", "e2e", "nodes1"} {
		if i, ok := nodeIndex(tag); ok {
			t.Errorf("nodeIndex(%q) = %d, want not a node tag", tag, i)
		}
	}
	h := NewHistSet(2)
	var tags []string
	for _, tg := range h.Tagged() {
		tags = append(tags, tg.Tag)
	}
	if !slices.Contains(tags, "node1") || !slices.Contains(tags, "node2") || slices.Contains(tags, "node0") {
		t.Errorf("tags %v, want node1 and node2", tags)
	}
	if h.ByTag("node1") != h.Nodes[0] {
		t.Error(`ByTag("node1") is not the first node's histogram`)
	}
}

func TestRecorderFirstNodeError(t *testing.T) {
	r := NewRecorder(3, 0)
	r.RecordNodeError(0, errors.New("before any hook")) // no hook: ignored
	var got []string
	r.OnFirstNodeError(func(node int, err error) { got = append(got, fmt.Sprintf("%d:%v", node, err)) })
	for _, e := range []struct {
		node int
		err  error
	}{
		{2, errors.New("refused")}, {2, errors.New("again")}, {0, errors.New("timeout")},
		{0, nil}, {7, errors.New("no such node")}, {-1, errors.New("no such node")}, {0, errors.New("later")},
	} {
		r.RecordNodeError(e.node, e.err)
	}
	if want := []string{"2:refused", "0:timeout"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

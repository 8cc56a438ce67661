package drill

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/infra/fault"
)

// slowTargets apply every fault after a delay, recording when each began
// and ended.
type slowTargets struct {
	delay time.Duration
	mu    sync.Mutex
	began map[string]time.Time
	ended map[string]time.Time
}

func (s *slowTargets) at(name string) fault.Injector {
	return fault.InjectorFunc(func(ctx context.Context, kind fault.Kind, _ fault.Params) (fault.Result, error) {
		s.mu.Lock()
		s.began[name] = time.Now()
		s.mu.Unlock()
		time.Sleep(s.delay)
		s.mu.Lock()
		s.ended[name] = time.Now()
		s.mu.Unlock()
		return fault.Result{Kind: kind}, nil
	})
}

func (s *slowTargets) Injector(id int) fault.Injector { return s.at(fmt.Sprintf("node%d", id)) }
func (s *slowTargets) EtcdInjector(m int) fault.Injector {
	return s.at(fmt.Sprintf("etcd%d", m))
}

// TestScheduleAppliesTwinsAtOnce: a fault on the Redis nodes and its twin on
// the etcd members, due at the same instant, start together, however long
// the first takes to apply; two faults on the nodes at the same instant keep
// the spec's order.
func TestScheduleAppliesTwinsAtOnce(t *testing.T) {
	tg := &slowTargets{delay: 200 * time.Millisecond, began: map[string]time.Time{}, ended: map[string]time.Time{}}
	in := &injector{at: tg, log: func(string, ...any) {}, nodeN: 5, etcdN: 3}
	faults := []Fault{
		{At: 10 * time.Millisecond, Kind: fault.Kill, Nodes: []int{2}},
		{At: 10 * time.Millisecond, Kind: fault.Kill, Nodes: []int{4}},
		{At: 10 * time.Millisecond, Kind: fault.Kill, Etcd: []int{2}},
	}
	if err := in.run(context.Background(), time.Now(), faults, time.Second); err != nil {
		t.Fatal(err)
	}
	if gap := tg.began["etcd2"].Sub(tg.began["node2"]).Abs(); gap > 100*time.Millisecond {
		t.Errorf("etcd member 2 began %v apart from node 2, want at once", gap)
	}
	if tg.began["node4"].Before(tg.ended["node2"]) {
		t.Errorf("node 4 began before node 2's fault was applied: the spec's order on one kind of target is lost")
	}
}

package drill

import (
	"reflect"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/infra/lab/faultlog"
)

// TestEtcdFaultRecord: a member's fault in the lab's record becomes a
// history record naming the member (and the leader target), not node 0.
func TestEtcdFaultRecord(t *testing.T) {
	t0 := time.Now()
	h := NewHistory(t0)
	h.addLabFault(lab.Fault{ID: "f1", Kind: "kill", Params: map[string]string{faultlog.EtcdMemberParam: "2", "target": "leader"},
		Start: t0.Add(time.Second), End: t0.Add(3 * time.Second)})
	h.addLabFault(lab.Fault{ID: "f2", Node: 4, Kind: "partition", Start: t0.Add(2 * time.Second)})
	got := h.Faults()
	want := []FaultRecord{
		{Type: "fault", ID: "f1", Fault: "kill", Nodes: []int{}, EtcdMember: 2, Target: "leader", Event: "start", AtNs: int64(time.Second)},
		{Type: "fault", ID: "f2", Fault: "partition", Nodes: []int{4}, Event: "start", AtNs: int64(2 * time.Second)},
		{Type: "fault", ID: "f1", Fault: "kill", Nodes: []int{}, EtcdMember: 2, Target: "leader", Event: "end", AtNs: int64(3 * time.Second)},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("faults:\n got %+v\nwant %+v", got, want)
	}
}

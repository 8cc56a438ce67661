package drill

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/redlocklab/redlocklab/drill/linear"
	"github.com/redlocklab/redlocklab/inventory"
	"github.com/redlocklab/redlocklab/loadgen"
)

// HistoryHTML is Porcupine's view of a drill's operations, written when a
// guard's history is not linearizable: every SKU's operations on the
// history's clock, the faults on a lane of their own.
const HistoryHTML = "history.html"

// modelTimeout bounds the model check of one drill: beyond it a guard's
// verdict is unknown, never a guess.
const modelTimeout = time.Minute

// Model is the model checker's verdict on a guard (package linear) and
// whether the exact checker, the store's audit, agrees with it on lost
// updates.
type Model struct {
	linear.Verdict
	// Agrees: the audit found lost updates (or oversell) exactly when the
	// history is not linearizable. Always true when the verdict is
	// unknown.
	Agrees bool `json:"agrees"`
}

// checkModel checks every guard's operations against its store with
// Porcupine, writes history.html into dir when one is not linearizable,
// and records each verdict in res. A model that disagrees with the audit
// is reported in res.Disagreements: one of the two checkers is wrong.
func checkModel(ctx context.Context, spec *Spec, res *Result, hist *History, runs []*guardRun, dir string) error {
	ops := hist.Ops()
	all := linear.Store{Initial: map[string]int64{}, Final: map[string]int64{}, Committed: map[string]int64{}}
	var checked []linear.Op
	for _, gr := range runs {
		st, err := guardStore(ctx, gr, spec.Workload.Stock)
		if err != nil {
			return fmt.Errorf("drill %s: guard %s: %w", spec.Name, gr.guard, err)
		}
		for k, v := range st.Initial {
			all.Initial[k], all.Final[k] = v, st.Final[k]
		}
		for id, after := range st.Committed {
			all.Committed[id] = after
		}
		for _, o := range ops {
			if o.Guard == string(gr.guard) {
				checked = append(checked, linearOp(o))
			}
		}
	}
	v := linear.Check(checked, all, modelTimeout)
	bad := map[string][]string{}
	for _, k := range v.Bad {
		g, _, _ := strings.Cut(k, ".")
		bad[g] = append(bad[g], k)
	}
	for _, gr := range runs {
		g := string(gr.guard)
		out := res.Guards[g]
		if out == nil {
			continue
		}
		m := Model{Verdict: linear.Verdict{Linearizable: len(bad[g]) == 0 && !v.Unknown, Unknown: v.Unknown, Bad: bad[g]}}
		for _, o := range checked {
			if strings.HasPrefix(o.Key, g+".") {
				m.Ops++
			}
		}
		lost := out.Counts.LostUpdates > 0 || out.Counts.Oversell > 0
		m.Agrees = m.Unknown || lost == !m.Linearizable
		if !m.Agrees {
			res.Disagreements = append(res.Disagreements, fmt.Sprintf("%s: the audit counts %d lost units and %d oversold SKUs, the model checker finds the history %s",
				g, out.Counts.LostUpdates, out.Counts.Oversell, m.Verdict.String()))
		}
		out.Model = &m
	}
	if v.Linearizable || v.Unknown {
		return nil
	}
	var faults []linear.Fault
	open := map[string]FaultRecord{}
	for _, f := range hist.Faults() {
		switch f.Event {
		case "start":
			open[f.ID] = f
		case "end":
			if s, ok := open[f.ID]; ok {
				faults = append(faults, linear.Fault{StartNs: s.AtNs, EndNs: f.AtNs, Desc: faultDesc(s)})
				delete(open, f.ID)
			}
		}
	}
	for _, s := range open {
		faults = append(faults, linear.Fault{StartNs: s.AtNs, EndNs: int64(spec.Workload.Duration), Desc: faultDesc(s)})
	}
	sort.Slice(faults, func(i, j int) bool { return faults[i].StartNs < faults[j].StartNs })
	return v.Visualize(filepath.Join(dir, HistoryHTML), faults)
}

func faultDesc(f FaultRecord) string {
	switch {
	case f.Guard != "":
		return f.Fault + " " + f.Guard
	case f.EtcdMember > 0:
		return fmt.Sprintf("%s etcd member %d", f.Fault, f.EtcdMember)
	}
	var ns []string
	for _, n := range f.Nodes {
		ns = append(ns, fmt.Sprint(n))
	}
	return f.Fault + " node " + strings.Join(ns, ",")
}

// linearOp is an operation of the history as the model checker takes it.
func linearOp(o OpRecord) linear.Op {
	return linear.Op{RequestID: o.RequestID, Key: o.Key, Quantity: o.Quantity, SentNs: o.SentNs, EndedNs: o.EndedNs,
		Reserved: o.Outcome == loadgen.Reserved.String(), OutOfStock: o.Outcome == loadgen.OutOfStock.String()}
}

// guardStore reads what guard gr's store holds after its load: its keys'
// stock, seeded and final, and its ledger.
func guardStore(ctx context.Context, gr *guardRun, stock int64) (linear.Store, error) {
	st := linear.Store{Initial: map[string]int64{}, Final: map[string]int64{}, Committed: map[string]int64{}}
	s, err := inventory.OpenStore(ctx, "sqlite:"+filepath.Join(gr.dir, "inventory.db"))
	if err != nil {
		return st, err
	}
	defer s.Close()
	keys := gr.keys.Names()
	for _, k := range keys {
		st.Initial[k] = stock
	}
	a, err := s.Audit(ctx, keys, st.Initial)
	if err != nil {
		return st, err
	}
	for k, line := range a.PerSKU {
		st.Final[k] = line.Final
	}
	ledger, err := s.Ledger(ctx)
	if err != nil {
		return st, err
	}
	for _, c := range ledger {
		st.Committed[c.RequestID] = c.StockAfter
	}
	return st, nil
}

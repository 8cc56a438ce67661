// Package linear is the second checker of a drill's protected resource:
// each SKU's stock, checked as a register with Porcupine
// (github.com/anishathalye/porcupine) against the operations the load
// made, on the history's monotonic clock.
//
// The exact checker (the store's audit) sums: initial − final = Σ ledger.
// This one replays: every committed reservation is a read-modify-write of
// the register, from stock s to the stock it left, which the ledger keeps
// (s − q, and s ≥ q); an out-of-stock answer reads a stock below q; the
// final read is the stock the store holds. The history must have an order
// that respects real time (an operation answered before another was sent
// comes first) in which every step is legal. Two holders that both read s
// and wrote s − q (a lost update) cannot both be placed. A reservation
// whose answer was lost or failed may or may not have taken effect, as in
// etcd's robustness tests; the ledger's request IDs settle which: one in
// the ledger committed (sometime before the final read, leaving the stock
// it says), one not in it had no effect. The two checkers must agree on
// whether updates were lost.
package linear

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Op is one operation of a guard's load, its times in ns on the history's
// clock.
type Op struct {
	RequestID string
	Key       string
	Quantity  int64
	// SentNs and EndedNs bound it; SentNs < 0 is an operation never sent.
	SentNs, EndedNs int64
	// Reserved: the service answered that it committed; OutOfStock that it
	// refused for want of stock. Neither: it failed, or no answer came.
	Reserved, OutOfStock bool
}

// Store is what the store holds after the load: each SKU's stock as it
// was seeded and as it is, and the ledger: each committed request ID and
// the stock it left (-1: not kept).
type Store struct {
	Initial, Final map[string]int64
	Committed      map[string]int64
}

// Fault is a fault window, for the visualization.
type Fault struct {
	StartNs, EndNs int64
	Desc           string
}

// Verdict is a guard's history judged.
type Verdict struct {
	// Linearizable: every SKU's history has a legal order.
	Linearizable bool `json:"linearizable"`
	// Unknown: the check ran out of time on some SKU (no verdict there).
	Unknown bool `json:"unknown,omitempty"`
	// Bad are the SKUs with no legal order.
	Bad []string `json:"bad,omitempty"`
	// Ops is how many operations were checked (settled, with effect or
	// an answer).
	Ops int `json:"ops"`
	// Settled is how many failed or unanswered operations the ledger
	// showed committed.
	Settled int `json:"settled"`

	info  porcupine.LinearizationInfo
	model porcupine.Model
}

// input and output are the model's.
type input struct {
	read bool
	qty  int64
}

type output struct {
	// reserved: the step took the units, leaving value (-1: unknown); out:
	// it found too few; a read saw value.
	reserved, out bool
	value         int64
}

// model is one SKU's stock.
func model(initial map[string]int64) porcupine.Model {
	return porcupine.Model{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[string][]porcupine.Operation{}
			var keys []string
			for _, op := range history {
				k := op.Metadata.(meta).key
				if _, ok := byKey[k]; !ok {
					keys = append(keys, k)
				}
				byKey[k] = append(byKey[k], op)
			}
			sort.Strings(keys)
			out := make([][]porcupine.Operation, len(keys))
			for i, k := range keys {
				out[i] = byKey[k]
			}
			return out
		},
		// The state is the pair (key, stock): a partition's first step
		// names its key, so Init needs none.
		Init: func() any { return state{} },
		Step: func(s, in, out any) (bool, any) {
			st, i, o := s.(state), in.(keyed).input, out.(output)
			if !st.known {
				st = state{known: true, stock: initial[in.(keyed).key]}
			}
			switch {
			case i.read:
				return o.value == st.stock, st
			case o.reserved:
				if st.stock < i.qty || (o.value >= 0 && o.value != st.stock-i.qty) {
					return false, st
				}
				return true, state{known: true, stock: st.stock - i.qty}
			case o.out:
				return st.stock < i.qty, st
			}
			return false, st
		},
		Equal: func(a, b any) bool { return a.(state) == b.(state) },
		DescribeOperation: func(in, out any) string {
			i, o := in.(keyed).input, out.(output)
			switch {
			case i.read:
				return fmt.Sprintf("final stock → %d", o.value)
			case o.reserved && o.value >= 0:
				return fmt.Sprintf("reserve %d → left %d", i.qty, o.value)
			case o.reserved:
				return fmt.Sprintf("reserve %d → taken", i.qty)
			}
			return fmt.Sprintf("reserve %d → out of stock", i.qty)
		},
		DescribeState: func(s any) string {
			st := s.(state)
			if !st.known {
				return "seeded"
			}
			return "stock " + strconv.FormatInt(st.stock, 10)
		},
		DescribeOperationMetadata: func(m any) string {
			md := m.(meta)
			if md.requestID == "" {
				return md.key
			}
			return md.key + " " + md.requestID + " (" + md.note + ")"
		},
	}
}

type state struct {
	known bool
	stock int64
}

type keyed struct {
	input
	key string
}

type meta struct {
	key, requestID, note string
}

// Check judges ops against the store, within timeout for the whole check
// (0: no bound).
func Check(ops []Op, st Store, timeout time.Duration) Verdict {
	var history []porcupine.Operation
	var end int64
	for _, o := range ops {
		end = max(end, o.EndedNs)
	}
	end++
	v := Verdict{}
	for _, o := range ops {
		if o.SentNs < 0 {
			continue // never sent: no effect, no answer
		}
		in := keyed{input: input{qty: o.Quantity}, key: o.Key}
		md := meta{key: o.Key, requestID: o.RequestID}
		out := output{value: -1}
		ret := o.EndedNs
		after, committed := st.Committed[o.RequestID]
		switch {
		case o.Reserved && committed:
			out.reserved, out.value, md.note = true, after, "answered taken"
		case o.Reserved:
			// Taken, says the service, yet not in the ledger: the model
			// takes the answer, and the stock will tell.
			out.reserved, md.note = true, "answered taken; NOT in the ledger"
		case o.OutOfStock:
			out.out, md.note = true, "answered out of stock"
		case committed:
			// Failed or unanswered, yet in the ledger: it took effect,
			// some time before the final read.
			out.reserved, out.value, md.note, ret = true, after, "no answer; in the ledger", end
			v.Settled++
		default:
			continue // failed and not in the ledger: no effect
		}
		history = append(history, porcupine.Operation{Input: in, Call: o.SentNs, Output: out, Return: ret, Metadata: md})
	}
	keys := map[string]bool{}
	for _, op := range history {
		keys[op.Metadata.(meta).key] = true
	}
	for k := range st.Final {
		keys[k] = true
	}
	for k := range keys {
		final, ok := st.Final[k]
		if !ok {
			continue
		}
		history = append(history, porcupine.Operation{Input: keyed{input: input{read: true}, key: k}, Call: end + 1,
			Output: output{value: final}, Return: end + 1, Metadata: meta{key: k}})
	}
	assignClients(history)
	v.Ops = len(history)
	v.model = model(st.Initial)
	res, info := porcupine.CheckOperationsVerbose(v.model, history, timeout)
	v.info = info
	v.Linearizable = res == porcupine.Ok
	v.Unknown = res == porcupine.Unknown
	if res == porcupine.Illegal {
		v.Bad = badKeys(v.model, history)
	}
	return v
}

// badKeys are the SKUs whose own history has no legal order.
func badKeys(m porcupine.Model, history []porcupine.Operation) []string {
	var bad []string
	for _, part := range m.Partition(history) {
		one := m
		one.Partition = nil
		if !porcupine.CheckOperations(one, part) {
			bad = append(bad, part[0].Metadata.(meta).key)
		}
	}
	return bad
}

// assignClients gives every operation a lane of the visualization: the
// lowest whose last operation ended before it was sent, per SKU.
func assignClients(history []porcupine.Operation) {
	sort.SliceStable(history, func(i, j int) bool { return history[i].Call < history[j].Call })
	free := map[string][]int64{} // per key: each lane's last return
	base := map[string]int{}
	next := 0
	for i := range history {
		k := history[i].Metadata.(meta).key
		if _, ok := base[k]; !ok {
			base[k] = next
			next += 1000
		}
		lanes := free[k]
		lane := -1
		for j, last := range lanes {
			if last < history[i].Call {
				lane = j
				break
			}
		}
		if lane < 0 {
			lane = len(lanes)
			lanes = append(lanes, 0)
		}
		lanes[lane] = history[i].Return
		free[k] = lanes
		history[i].ClientId = base[k] + lane
	}
	// Porcupine numbers clients from 0 without gaps.
	ids := map[int]int{}
	var order []int
	for _, op := range history {
		if _, ok := ids[op.ClientId]; !ok {
			ids[op.ClientId] = 0
			order = append(order, op.ClientId)
		}
	}
	sort.Ints(order)
	for i, id := range order {
		ids[id] = i
	}
	for i := range history {
		history[i].ClientId = ids[history[i].ClientId]
	}
}

// Visualize writes Porcupine's HTML view of the checked history to path,
// with the faults as annotations on a lane of their own.
func (v Verdict) Visualize(path string, faults []Fault) error {
	var anns []porcupine.Annotation
	for _, f := range faults {
		anns = append(anns, porcupine.Annotation{Tag: "faults", Start: f.StartNs, End: f.EndNs, Description: f.Desc,
			BackgroundColor: "#fde8e8"})
	}
	info := v.info
	info.AddAnnotations(anns)
	if err := porcupine.VisualizePath(v.model, info, path); err != nil {
		return fmt.Errorf("linear: %w", err)
	}
	return nil
}

// String is the verdict in a few words.
func (v Verdict) String() string {
	switch {
	case v.Unknown:
		return "unknown (the check ran out of time)"
	case v.Linearizable:
		return fmt.Sprintf("linearizable (%d operations)", v.Ops)
	}
	return fmt.Sprintf("NOT linearizable: SKU %s", strings.Join(v.Bad, ", "))
}

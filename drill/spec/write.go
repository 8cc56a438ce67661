// Writing a spec back out: the front matter Parse reads, so that a program
// that makes specs (an explorer's schedules, a planner's checks) writes
// runbooks `redlab drill` runs.

package spec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/lab/profile"
	"github.com/redlocklab/redlocklab/inventory"
	"github.com/redlocklab/redlocklab/loadgen/loadspec"
)

// FrontMatter renders s as a runbook's front matter, from its opening
// "---" line to its closing one: the YAML Parse reads back to the same
// Spec (but for File and the Line fields, which say where it was read).
// The same spec always gives the same bytes: keys in a fixed order,
// expectations in the workload's guard order, numbers and durations in
// their shortest form. Fields equal to a parse default that no reader
// needs to see (quantity 1, replicas, stock, acquire timeout) are left
// out; the lab, the rate, the TTL and the seed are always written.
func (s *Spec) FrontMatter() []byte {
	var b bytes.Buffer
	b.WriteString(frontMatterDelimiter + "\n")
	fmt.Fprintf(&b, "drill: %s\n", s.Name)
	if s.Title != "" {
		fmt.Fprintf(&b, "title: %s\n", quote(s.Title))
	}
	fmt.Fprintf(&b, "lab: {%s}\n", strings.Join(labItems(s.Lab), ", "))
	fmt.Fprintf(&b, "workload: {%s}\n", strings.Join(s.workloadItems(), ", "))
	if len(s.Faults) > 0 {
		b.WriteString("faults:\n")
		for _, f := range s.Faults {
			fmt.Fprintf(&b, "  - {%s}\n", strings.Join(faultItems(f), ", "))
		}
	}
	if len(s.Windows) > 0 {
		items := make([]string, len(s.Windows))
		for i, w := range s.Windows {
			items[i] = fmt.Sprintf("%s: %s-%s", w.Name, dur(w.From), dur(w.To))
		}
		fmt.Fprintf(&b, "windows: {%s}\n", strings.Join(items, ", "))
	}
	b.WriteString("expect:\n")
	for _, g := range s.Workload.Guards {
		xs := s.Expect[g]
		if len(xs) == 0 {
			continue
		}
		exprs := make([]string, len(xs))
		for i, x := range xs {
			exprs[i] = quote(x.Expr)
		}
		fmt.Fprintf(&b, "  %s: [%s]\n", g, strings.Join(exprs, ", "))
	}
	b.WriteString(frontMatterDelimiter + "\n")
	return b.Bytes()
}

// Format is a whole runbook: s's front matter, then body (Markdown for
// people, which Parse ignores).
func Format(s *Spec, body string) []byte {
	out := s.FrontMatter()
	if body != "" {
		out = append(out, '\n')
		out = append(out, body...)
		if !strings.HasSuffix(body, "\n") {
			out = append(out, '\n')
		}
	}
	return out
}

func labItems(p profile.Profile) []string {
	items := []string{"nodes: " + strconv.Itoa(p.Nodes)}
	if u := p.Uniform(); u != profile.PersistMixed && u != "" {
		items = append(items, "persistence: "+string(u))
	} else {
		items = append(items, "persistence: ["+profile.FormatPersistenceList(p.Persistence)+"]")
	}
	items = append(items, "restart_delay: "+dur(p.RestartDelay))
	if p.Replicas > 0 {
		items = append(items, "replicas: "+strconv.Itoa(p.Replicas))
	}
	if p.Machines {
		items = append(items, "machines: true")
	}
	if p.Etcd > 0 {
		items = append(items, "etcd: "+strconv.Itoa(p.Etcd))
	}
	if p.EtcdUnsafeNoFsync {
		items = append(items, "etcd_unsafe_no_fsync: true")
	}
	if p.TLS {
		items = append(items, "tls: true")
	}
	if p.PowerLoss {
		items = append(items, "power_loss: true")
	}
	return items
}

func (s *Spec) workloadItems() []string {
	w := s.Workload
	items := []string{
		"guards: [" + inventory.JoinGuards(w.Guards) + "]",
		"rate: " + num(w.Rate),
		"duration: " + dur(w.Duration),
		"keys: " + w.Keys.String(),
	}
	if !w.Hold.IsZero() {
		items = append(items, "hold: "+holdText(w.Hold))
	}
	if w.Quantity != (loadspec.QuantitySpec{Min: 1, Max: 1}) {
		items = append(items, "quantity: "+w.Quantity.String())
	}
	items = append(items, "lock_ttl: "+dur(w.LockTTL))
	if w.AcquireTimeout != inventory.DefaultAcquireTimeout {
		items = append(items, "acquire_timeout: "+dur(w.AcquireTimeout))
	}
	if w.NodeTimeout > 0 {
		items = append(items, "node_timeout: "+dur(w.NodeTimeout))
	}
	var opts []string
	for _, g := range w.Guards {
		if d, ok := w.GuardNodeTimeout[g]; ok {
			v := "default"
			if d > 0 {
				v = dur(d)
			}
			opts = append(opts, fmt.Sprintf("%s: {node_timeout: %s}", g, v))
		}
	}
	if len(opts) > 0 {
		items = append(items, "guard_options: {"+strings.Join(opts, ", ")+"}")
	}
	if w.Replicas != DefaultReplicas {
		items = append(items, "replicas: "+strconv.Itoa(w.Replicas))
	}
	if w.Stock != DefaultStock {
		items = append(items, "stock: "+strconv.FormatInt(w.Stock, 10))
	}
	items = append(items, "seed: "+strconv.FormatUint(w.Seed, 10))
	return items
}

// holdText is a hold as ParseHold reads it, its durations in their
// shortest form.
func holdText(h loadspec.HoldSpec) string {
	if h.Min == h.Max {
		return dur(h.Min)
	}
	return "uniform:" + dur(h.Min) + ":" + dur(h.Max)
}

func faultItems(f Fault) []string {
	items := []string{"at: " + dur(f.At), "fault: " + string(f.Kind)}
	switch {
	case len(f.Etcd) > 0:
		ms := make([]string, len(f.Etcd))
		for i, m := range f.Etcd {
			ms[i] = MemberName(m)
		}
		items = append(items, "etcd: ["+strings.Join(ms, ", ")+"]")
	case len(f.Nodes) > 0:
		ns := make([]string, len(f.Nodes))
		for i, n := range f.Nodes {
			ns[i] = strconv.Itoa(n)
		}
		items = append(items, "nodes: ["+strings.Join(ns, ", ")+"]")
	}
	def, _ := fault.Lookup(f.Kind)
	for _, p := range def.AllParams() {
		v, ok := f.Params[p.Name]
		if !ok {
			continue
		}
		switch {
		case p.Name == "guards":
			items = append(items, "guards: ["+inventory.JoinGuards(f.Guards)+"]")
		case p.Name == "scope":
			items = append(items, "scope: "+string(f.Scope))
		case p.Type == fault.Duration:
			items = append(items, p.Name+": "+dur(v.D))
		case p.Type == fault.Float, p.Type == fault.Int:
			items = append(items, p.Name+": "+num(v.N))
		}
	}
	return items
}

// dur is a duration in its shortest form Go reads back: 10s, 1m30s,
// 500ms, -2s.
func dur(d time.Duration) string { return fault.Dur(d) }

func num(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// quote is s as a double-quoted YAML scalar (JSON's escapes are YAML's).
func quote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

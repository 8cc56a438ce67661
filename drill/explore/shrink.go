package explore

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/redlocklab/redlocklab/drill/spec"
	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/inventory"
)

// Shrinking narrows a failing schedule down, as delta debugging does,
// greedily: drop the guards not involved, remove a fault, shorten one,
// take a target away from one, move one to the first fault's time. A
// candidate is replayed up to ShrinkRuns times on the same lab and kept
// when it fails the same way (the same guard, the same harm) in at least
// ShrinkShare of them; the first kept candidate becomes the schedule, and
// the search starts over, until no candidate is kept or the budget ends.
// One schedule is shrunk per finding: a guard, a harm and the fault kinds
// that made it.

// shrinkAll shrinks one failing schedule per finding, within the budget.
func (r *runner) shrinkAll(ctx context.Context) error {
	c := r.c
	began := time.Now()
	deadline := began.Add(c.ShrinkBudget)
	defer func() { r.res.ShrinkS += time.Since(began).Seconds() }()
	// Every (guard, harm) a schedule showed is a candidate finding: lock
	// violations first (the lock itself failed), then lost data; a guard
	// that promises more first (etcd before Redlock before one node); the
	// fewest faults first.
	type job struct {
		o *Outcome
		g inventory.Guard
		h Harm
	}
	var jobs []job
	for _, o := range r.res.Schedules {
		if !o.Failing() {
			continue
		}
		for _, h := range []Harm{HarmLockViolation, HarmLostUpdate} {
			for _, g := range c.Guards {
				if o.Guards[string(g)].Has(h) {
					jobs = append(jobs, job{o, g, h})
				}
			}
		}
	}
	rank := func(j job) int {
		r := len(j.o.Faults) + 10*strength(j.g)
		if j.h != HarmLockViolation {
			r += 1000
		}
		return r
	}
	slices.SortStableFunc(jobs, func(a, b job) int { return rank(a) - rank(b) })
	// shrunk are the findings written: a schedule whose guard, harm and
	// fault kinds include one's is the same finding again.
	var shrunk []finding
	for _, j := range jobs {
		o, g, h := j.o, j.g, j.h
		s, err := c.schedule(o.Index)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(shrunk, func(f finding) bool { return f.covers(s, g, h) }) {
			continue
		}
		if time.Now().After(deadline) {
			c.logf("shrinking: the budget of %v is spent; %s (%s %s) is not shrunk", c.ShrinkBudget, o.Name, g, words[h])
			continue
		}
		f, out, err := r.shrink(ctx, s, g, h, deadline)
		if err != nil {
			return err
		}
		if f.Runbook != "" {
			shrunk = append(shrunk, finding{g, h, kindSet(out)})
		}
		r.res.Findings = append(r.res.Findings, f)
		if err := r.res.write(c.Out); err != nil {
			return err
		}
	}
	return nil
}

// strength ranks a guard by what it promises, most first: a failure of a
// lock that promises more is shrunk first.
func strength(g inventory.Guard) int {
	order := []inventory.Guard{inventory.GuardEtcdFenced, inventory.GuardEtcd, inventory.GuardRedlockFenced, inventory.GuardRedlock,
		inventory.GuardRedsync, inventory.GuardRedisSingle}
	if i := slices.Index(order, g); i >= 0 {
		return i
	}
	return len(order)
}

// finding is what a shrunk schedule found: a guard, a harm, and the fault
// kinds that made it.
type finding struct {
	guard inventory.Guard
	harm  Harm
	kinds []fault.Kind
}

// covers reports whether s failing with h of g is f again: the same harm
// under faults that include f's kinds. The guard does not matter: two
// Redlock guards broken by one clock jump are one finding, shrunk once,
// for the guard that promises most.
func (f finding) covers(s *spec.Spec, g inventory.Guard, h Harm) bool {
	if f.harm != h {
		return false
	}
	have := kindSet(s)
	for _, k := range f.kinds {
		if !slices.Contains(have, k) {
			return false
		}
	}
	return true
}

// kindSet is s's fault kinds, each once, in order.
func kindSet(s *spec.Spec) []fault.Kind {
	var out []fault.Kind
	for _, f := range s.Faults {
		if !slices.Contains(out, f.Kind) {
			out = append(out, f.Kind)
		}
	}
	slices.Sort(out)
	return out
}

// trial is a candidate's replays: how many failed the same way, of how
// many run.
type trial struct{ failed, runs int }

// shrink narrows s, which failed with harm h of guard g, and writes the
// result as a runbook.
func (r *runner) shrink(ctx context.Context, s *spec.Spec, g inventory.Guard, h Harm, deadline time.Time) (Finding, *spec.Spec, error) {
	c := r.c
	began := time.Now()
	f := Finding{Schedule: s.Name, Guard: string(g), Harm: h, Before: faultWords(s)}
	name := fmt.Sprintf("%s-%s-%d-%03d", g, strings.ReplaceAll(string(h), "_", "-"), c.Seed, indexOf(s.Name))
	c.logf("shrinking %s: %s %s under %s", s.Name, g, words[h], joinStrings(f.Before))
	step := 0
	try := func(cand *spec.Spec) (trial, error) {
		step++
		cand.Name = fmt.Sprintf("%s-try%d", name, step)
		cand.Expect = map[inventory.Guard][]spec.Expectation{g: {harmExpectation(h, cand.Lab.Nodes)}}
		// What runs is what a runbook would say: written and read back.
		back, err := spec.Parse(cand.Name+".md", spec.Format(cand, ""))
		if err != nil {
			c.logf("shrinking %s: a candidate is not a valid spec, skipped: %v", s.Name, err)
			return trial{}, nil
		}
		return r.replay(ctx, back, g, h, c.ShrinkRuns, true)
	}
	first, err := try(clone(s))
	if err != nil {
		return f, nil, err
	}
	// kept are the schedules kept, the original first when it failed
	// again often enough: the final count may find the last one reproduces
	// less often than its early stop said, and then falls back on the one
	// before. A schedule that failed once but rarely replays is shrunk all
	// the same: a smaller one (fewer guards, fewer faults) often fails
	// more often than the schedule as drawn.
	var kept []*spec.Spec
	steps := 1 // kept[i] is steps+i steps from the schedule as drawn
	if c.accepts(first) {
		kept = append(kept, clone(s))
		steps = 0
	} else {
		c.logf("shrinking %s: as drawn it failed again %d times in %d; trying smaller schedules", s.Name, first.failed, first.runs)
	}
	cur := clone(s)
	for progress := true; progress; {
		progress = false
		for _, cand := range candidates(cur, g) {
			if time.Now().After(deadline) {
				f.Note = "the shrinking budget ran out: the schedule may shrink further"
				break
			}
			t, err := try(cand)
			if err != nil {
				return f, nil, err
			}
			if c.accepts(t) {
				c.logf("shrinking %s: kept %s on %s (failed %d of %d)", s.Name, joinStrings(faultWords(cand)), joinGuards(cand.Workload.Guards), t.failed, t.runs)
				cur, progress = cand, true
				kept = append(kept, cand)
				break
			}
			if len(kept) == 0 && f.Note == "" && time.Since(began) > c.ShrinkBudget/4 {
				// Nothing reproduces at the first step: not worth the rest.
				break
			}
		}
		if f.Note != "" {
			break
		}
	}
	if len(kept) == 0 {
		f.Note = fmt.Sprintf("neither the schedule (failed again %d times in %d) nor a smaller one failed often enough to shrink", first.failed, first.runs)
		c.logf("shrinking %s: %s", s.Name, f.Note)
		f.TookS = time.Since(began).Seconds()
		return f, nil, nil
	}
	// The final count, every replay run: what the runbook promises. When
	// the last schedule kept falls short of the share, the one before it
	// is counted, back to the first kept.
	var out *spec.Spec
	var final trial
	for i := len(kept) - 1; i >= 0; i-- {
		out = clone(kept[i])
		out.Name = name
		out.Title = fmt.Sprintf("%s: %s under %s (found by redlab explore, seed %d)", g, words[h], kindWords(out), c.Seed)
		out.Expect = map[inventory.Guard][]spec.Expectation{g: {harmExpectation(h, out.Lab.Nodes)}}
		if final, err = r.replay(ctx, out, g, h, c.ShrinkRuns, false); err != nil {
			return f, nil, err
		}
		f.Steps = steps + i
		if c.accepts(final) || time.Now().After(deadline) {
			break
		}
		c.logf("shrinking %s: %s reproduced %d of %d: back one step", s.Name, joinStrings(faultWords(out)), final.failed, final.runs)
	}
	f.After, f.Guards, f.Reproduced, f.Runs = faultWords(out), guardNames(out.Workload.Guards), final.failed, final.runs
	if !c.accepts(final) {
		// A runbook promises a failure that replays: one that reproduced
		// less often than the share in its final count is reported, and
		// not written.
		f.Note = fmt.Sprintf("it reproduced %d of %d in the final count, fewer than the %v needed: no runbook written", final.failed, final.runs, c.needed())
		f.TookS = time.Since(began).Seconds()
		c.logf("shrinking %s: %s", s.Name, f.Note)
		os.RemoveAll(filepath.Join(c.Out, shrinkDir))
		return f, nil, nil
	}
	if err := os.MkdirAll(c.Found, 0o755); err != nil {
		return f, nil, fmt.Errorf("explore: %w", err)
	}
	f.Runbook = filepath.Join(c.Found, name+".md")
	if err := os.WriteFile(f.Runbook, spec.Format(out, foundBody(c, s, out, f)), 0o644); err != nil {
		return f, nil, fmt.Errorf("explore: %w", err)
	}
	f.TookS = time.Since(began).Seconds()
	c.logf("shrinking %s: %d → %d faults, reproduced %d/%d: %s", s.Name, len(f.Before), len(f.After), f.Reproduced, f.Runs, f.Runbook)
	os.RemoveAll(filepath.Join(c.Out, shrinkDir))
	return f, out, nil
}

// accepts reports whether a candidate's trial keeps it.
func (c *Config) accepts(t trial) bool {
	return t.runs > 0 && float64(t.failed) >= c.needed()
}

// needed is how many of ShrinkRuns replays must fail.
func (c *Config) needed() float64 { return math.Ceil(c.ShrinkShare * float64(c.ShrinkRuns)) }

// replay runs cand up to n times on the session's lab; with early it stops
// as soon as the verdict is certain. Invalid replays and replays on a lab
// that was not clean are run again (at most n more).
func (r *runner) replay(ctx context.Context, cand *spec.Spec, g inventory.Guard, h Harm, n int, early bool) (trial, error) {
	c := r.c
	var t trial
	need := int(c.needed())
	for tries := 0; t.runs < n && tries < 2*n; tries++ {
		if early && (t.failed >= need || t.failed+(n-t.runs) < need) {
			break
		}
		if ctx.Err() != nil {
			return t, fmt.Errorf("explore: interrupted while shrinking: %w", ctx.Err())
		}
		clean, err := r.sess.Reset(ctx)
		if err != nil || !clean.OK() {
			if err := r.replaceLab(ctx); err != nil {
				return t, err
			}
			continue
		}
		dir := filepath.Join(c.Out, shrinkDir, cand.Name, fmt.Sprint(tries))
		seed := cand.Workload.Seed + uint64(tries)
		res, err := r.sess.Run(ctx, cand, dir, seed)
		if err != nil {
			c.logf("shrinking: %s did not run: %v", cand.Name, err)
			continue
		}
		if res.Invalid != "" {
			continue
		}
		t.runs++
		var o Outcome
		c.outcomeOf(&o, res)
		if o.Guards[string(g)].Has(h) {
			t.failed++
		}
	}
	os.RemoveAll(filepath.Join(c.Out, shrinkDir, cand.Name))
	return t, nil
}

// candidates are the schedules one step smaller than s, the likeliest to
// shrink most first.
func candidates(s *spec.Spec, g inventory.Guard) []*spec.Spec {
	var out []*spec.Spec
	// Only the guard that failed (client pauses on it alone).
	if len(s.Workload.Guards) > 1 {
		c := clone(s)
		c.Workload.Guards = []inventory.Guard{g}
		for i := range c.Faults {
			if c.Faults[i].Kind == fault.ClientPause && len(c.Faults[i].Guards) > 0 {
				c.Faults[i].Guards = []inventory.Guard{g}
			}
		}
		out = append(out, c)
	}
	// One fault fewer.
	if len(s.Faults) > 1 {
		for i := range s.Faults {
			c := clone(s)
			c.Faults = slices.Delete(c.Faults, i, i+1)
			out = append(out, c)
		}
	}
	for i, f := range s.Faults {
		// Shorter.
		if d := f.For(); d >= 400*time.Millisecond {
			c := clone(s)
			c.Faults[i].Params[fault.For] = fault.Value{D: (d / 2).Round(100 * time.Millisecond)}
			out = append(out, c)
		}
		// On one target fewer.
		if len(f.Nodes) > 1 {
			c := clone(s)
			c.Faults[i].Nodes = f.Nodes[:len(f.Nodes)-1]
			out = append(out, c)
		}
		if len(f.Etcd) > 1 {
			c := clone(s)
			c.Faults[i].Etcd = f.Etcd[:len(f.Etcd)-1]
			out = append(out, c)
		}
		// Moved to the first fault's time.
		if i > 0 && f.At > s.Faults[0].At {
			c := clone(s)
			c.Faults[i].At = s.Faults[0].At
			out = append(out, c)
		}
	}
	for _, c := range out {
		sort.SliceStable(c.Faults, func(a, b int) bool { return c.Faults[a].At < c.Faults[b].At })
	}
	return out
}

// clone is a deep copy of s, as far as shrinking changes it.
func clone(s *spec.Spec) *spec.Spec {
	c := *s
	c.Workload.Guards = slices.Clone(s.Workload.Guards)
	c.Faults = make([]spec.Fault, len(s.Faults))
	for i, f := range s.Faults {
		f.Nodes, f.Etcd, f.Guards = slices.Clone(f.Nodes), slices.Clone(f.Etcd), slices.Clone(f.Guards)
		params := fault.Params{}
		for k, v := range f.Params {
			params[k] = v
		}
		f.Params = params
		c.Faults[i] = f
	}
	c.Expect = map[inventory.Guard][]spec.Expectation{}
	for g, xs := range s.Expect {
		c.Expect[g] = slices.Clone(xs)
	}
	return &c
}

// harmExpectation is the expectation that harm h shows.
func harmExpectation(h Harm, nodes int) spec.Expectation {
	expr := "safety.lock_violations>0"
	if h == HarmLostUpdate {
		expr = "safety.lost_updates>0"
	}
	x, _ := spec.ParseExpectation(expr, nodes)
	return x
}

// indexOf is a schedule's index, from its name.
func indexOf(name string) int {
	var seed uint64
	var i int
	fmt.Sscanf(name, "explore-%d-%d", &seed, &i)
	return i
}

// kindWords are a spec's fault kinds, each once.
func kindWords(s *spec.Spec) string {
	var ks []string
	for _, f := range s.Faults {
		if !slices.Contains(ks, string(f.Kind)) {
			ks = append(ks, string(f.Kind))
		}
	}
	return strings.Join(ks, " and ")
}

// Package explore searches for what nobody scripted: seeded random fault
// schedules drawn from the fault catalogue, each run against every guard
// at once on one lab that serves them all, each judged by the drill's
// checkers (the interval checker of the history, the store's audit, the
// model checker of package linear), and counted as rates per guard with a
// 95 % interval. Every schedule is a drill spec, so any of them replays
// with `redlab drill`; a failing one is shrunk (fewer, shorter faults on
// fewer targets, fewer guards) to a runbook that reproduces it.
//
// After etcd's robustness tests: a schedule whose load before its first
// fault fell below the minimum rate is invalid and not judged, and the lab
// must be proved clean before each schedule (one that is not is discarded
// and counted). After Antithesis: each fault family implies states the
// search must reach at least once (Properties); a run that reaches none is
// inconclusive.
package explore

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/redlocklab/redlocklab/drill"
	"github.com/redlocklab/redlocklab/drill/spec"
	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/lab/profile"
	"github.com/redlocklab/redlocklab/inventory"
)

// Config is one search.
type Config struct {
	// Seed picks every schedule: the same seed and config draw the same
	// schedules.
	Seed uint64
	// Budget bounds the search (shrinking has its own, ShrinkBudget);
	// MaxSchedules, when > 0, bounds the schedules drawn.
	Budget       time.Duration
	MaxSchedules int
	// Families are the fault families switched on (Families).
	Families []string
	// Lab is the operating rules the nodes run with; etcd members and the
	// power-loss filesystem are added as the guards and families need.
	Lab    profile.Profile
	Guards []inventory.Guard
	Shape  Shape
	// Unavailable is the share of requests found unavailable above which
	// a schedule counts as HarmUnavailable for a guard.
	Unavailable float64
	// MaxInvalid is the share of invalid schedules above which the run
	// fails: a host too busy to search.
	MaxInvalid float64
	// Shrink turns shrinking on: ShrinkRuns replays per candidate, kept
	// when it fails in at least ShrinkShare of them, within ShrinkBudget.
	Shrink       bool
	ShrinkRuns   int
	ShrinkShare  float64
	ShrinkBudget time.Duration
	// Out receives explore.json, report.html and the schedules; Found
	// the shrunk runbooks.
	Out, Found string
	// Keep keeps every schedule's whole directory; by default a schedule
	// with no harm keeps only its result, history and spec.
	Keep bool
	// Commit is the build's commit, recorded with the seed.
	Commit string
	// Drill is how the session's lab runs (binaries, directories).
	Drill drill.Options
	// Target is what applies the faults: process nodes (the lab) or
	// machine nodes; hosts over SSH when Drill.Hosts is set.
	Target fault.Target
	Log    io.Writer
}

// DefaultConfig is a search of every default family against the default
// guards, under the operating rules.
func DefaultConfig() Config {
	sh := DefaultShape()
	return Config{
		Families: slices.Clone(DefaultFamilies), Guards: slices.Clone(DefaultGuards), Shape: sh, Lab: DefaultLab(sh.LockTTL),
		Unavailable: 0.05, MaxInvalid: 0.5, Shrink: true, ShrinkRuns: 5, ShrinkShare: 0.6, ShrinkBudget: 30 * time.Minute,
		Found: filepath.Join("runbooks", "found"), Target: fault.ProcessNode,
	}
}

// Prepare fills what the guards and families need into the lab (etcd
// members, the power-loss filesystem), checks that the target can apply
// every family, and validates the whole: an error names what to change.
func (c *Config) Prepare() error {
	if c.Seed == 0 {
		return errors.New("explore: give a seed (any number but 0): the same seed draws the same schedules")
	}
	if len(c.Guards) == 0 {
		return errors.New("explore: no guards")
	}
	for _, g := range c.Guards {
		if err := g.CheckTTL(c.Shape.LockTTL); err != nil {
			return fmt.Errorf("explore: %w", err)
		}
	}
	if h := c.Drill.Hosts; h != nil {
		// On hosts over SSH: the inventory's nodes, which list no etcd
		// member; a power cut is the host's own, not the lab's filesystem.
		c.Target = fault.SSHHost
		c.Lab.Nodes = len(h.Inventory.Hosts)
		c.Guards = slices.DeleteFunc(c.Guards, func(g inventory.Guard) bool { return g.NeedsEtcd() })
		if len(c.Guards) == 0 {
			return errors.New("explore: on hosts every guard but the etcd ones runs: give one")
		}
	} else {
		if slices.ContainsFunc(c.Guards, func(g inventory.Guard) bool { return g.NeedsEtcd() }) && c.Lab.Etcd == 0 {
			c.Lab.Etcd = 3
		}
		if slices.Contains(c.Families, "power") {
			c.Lab.PowerLoss = true
		}
	}
	lab, err := c.Lab.WithDefaults()
	if err != nil {
		return fmt.Errorf("explore: --lab: %w", err)
	}
	c.Lab = lab
	for _, name := range c.Families {
		f, ok := lookup(name)
		if !ok {
			return fmt.Errorf("explore: unknown fault family %q", name)
		}
		if f.Needs != nil {
			if why := f.Needs(c.Lab); why != "" {
				return fmt.Errorf("explore: %s: %s", name, why)
			}
		}
		for _, k := range f.Kinds {
			d, _ := fault.Lookup(k)
			target := c.Target
			if k == fault.ClientPause {
				target = fault.ServiceProcess
			}
			if !d.Can(target) {
				return fmt.Errorf("explore: %s: %s cannot be applied on %s: switch the family off (--faults)", name, k, target)
			}
		}
	}
	if c.Shape.Duration <= c.Shape.LastFault+time.Second {
		return fmt.Errorf("explore: a schedule of %v leaves no room after its last fault at %v", c.Shape.Duration, c.Shape.LastFault)
	}
	if c.Shrink && (c.ShrinkRuns < 1 || c.ShrinkShare <= 0 || c.ShrinkShare > 1) {
		return fmt.Errorf("explore: shrinking replays a candidate %d times and keeps it at a share of %g: want at least 1 and (0, 1]", c.ShrinkRuns, c.ShrinkShare)
	}
	if c.Out == "" {
		return errors.New("explore: no output directory")
	}
	// Every drawn schedule must be a valid spec: draw the first one.
	if _, err := c.schedule(0); err != nil {
		return err
	}
	return nil
}

// schedule draws schedule i and passes it through the spec language (its
// runbook written and read back), so that what runs is what replays.
func (c *Config) schedule(i int) (*spec.Spec, error) {
	s := c.Draw(i)
	back, err := spec.Parse(s.Name+".md", spec.Format(s, ""))
	if err != nil {
		return nil, fmt.Errorf("explore: schedule %d of seed %d is not a valid drill spec: %w", i, c.Seed, err)
	}
	return back, nil
}

// Outcome is one schedule's result, as explore.json keeps it.
type Outcome struct {
	Index int    `json:"index"`
	Name  string `json:"name"`
	// Spec is the schedule's runbook, relative to the output directory.
	Spec   string   `json:"spec"`
	Faults []string `json:"faults"`
	// Discarded says why the lab was not clean before the schedule, which
	// then did not run; Error why it could not run; Invalid why it ran
	// but cannot be judged. A judged schedule has none of the three.
	Discarded string `json:"discarded,omitempty"`
	Error     string `json:"error,omitempty"`
	Invalid   string `json:"invalid,omitempty"`
	// Guards are the judged schedule's verdicts.
	Guards map[string]GuardOutcome `json:"guards,omitempty"`
	// CrashUnderLock and PowerUnderLock: a crash or a power cut started
	// while a lock was held.
	CrashUnderLock bool `json:"crash_under_lock,omitempty"`
	PowerUnderLock bool `json:"power_under_lock,omitempty"`
	// Disagreements are the guards whose two checkers disagreed.
	Disagreements []string `json:"disagreements,omitempty"`
	// HistoryHTML is the model checker's view, when a guard was not
	// linearizable, relative to the output directory.
	HistoryHTML string  `json:"history_html,omitempty"`
	TookS       float64 `json:"took_s"`
}

// Judged reports whether the schedule ran and can be judged.
func (o *Outcome) Judged() bool { return o.Discarded == "" && o.Error == "" && o.Invalid == "" }

// Failing reports whether a guard lost its lock or its data, or the
// checkers disagreed: what shrinking narrows down.
func (o *Outcome) Failing() bool {
	if !o.Judged() {
		return false
	}
	for _, g := range o.Guards {
		if g.LockViolations > 0 || g.LostUpdates > 0 {
			return true
		}
	}
	return len(o.Disagreements) > 0
}

// GuardOutcome is one guard in one schedule.
type GuardOutcome struct {
	LockViolations   int64   `json:"lock_violations"`
	DoubleGrants     int64   `json:"double_grants"`
	LostUpdates      int64   `json:"lost_updates"`
	FencedRejections int64   `json:"fenced_rejections"`
	Requests         int64   `json:"requests"`
	Unavailable      int64   `json:"unavailable"`
	Availability     float64 `json:"availability"`
	// Linearizable is the model checker's verdict ("yes", "no", "unknown").
	Linearizable string `json:"linearizable"`
	// Harms are the harms the guard showed.
	Harms []Harm `json:"harms,omitempty"`
}

// Has reports whether the guard showed h.
func (g GuardOutcome) Has(h Harm) bool { return slices.Contains(g.Harms, h) }

// outcomeOf turns a drill's result into the schedule's outcome.
func (c *Config) outcomeOf(o *Outcome, res *drill.Result) {
	if res.Invalid != "" {
		o.Invalid = res.Invalid
		return
	}
	o.Guards = map[string]GuardOutcome{}
	o.Disagreements = res.Disagreements
	for g, gr := range res.Guards {
		ct := gr.Counts
		got := GuardOutcome{LockViolations: ct.LockViolations, DoubleGrants: ct.DoubleGrants, LostUpdates: ct.LostUpdates,
			FencedRejections: ct.FencedRejections, Requests: ct.Requests, Unavailable: ct.Unavailable, Availability: gr.Availability, Linearizable: "–"}
		if m := gr.Model; m != nil {
			switch {
			case m.Unknown:
				got.Linearizable = "unknown"
			case m.Linearizable:
				got.Linearizable = "yes"
			default:
				got.Linearizable = "no"
			}
		}
		if ct.LockViolations > 0 {
			got.Harms = append(got.Harms, HarmLockViolation)
		}
		if ct.DoubleGrants > 0 {
			got.Harms = append(got.Harms, HarmDoubleGrant)
		}
		if ct.LostUpdates > 0 || ct.Oversell > 0 {
			got.Harms = append(got.Harms, HarmLostUpdate)
		}
		if ct.Requests > 0 && float64(ct.Unavailable)/float64(ct.Requests) > c.Unavailable {
			got.Harms = append(got.Harms, HarmUnavailable)
		}
		o.Guards[g] = got
	}
}

// underLock reads a schedule's history: did a crash or a power cut start
// while a lock was held?
func underLock(dir string) (crash, power bool, err error) {
	f, err := os.Open(filepath.Join(dir, drill.HistoryFile))
	if err != nil {
		return false, false, err
	}
	defer f.Close()
	recs, err := drill.ReadRecords(f)
	if err != nil {
		return false, false, err
	}
	held := func(at int64) bool {
		for _, h := range recs.Holds {
			if h.GrantedNs <= at && at < h.ReleasedNs {
				return true
			}
		}
		return false
	}
	for _, fr := range recs.Faults {
		if fr.Event != "start" {
			continue
		}
		switch fault.Kind(fr.Fault) {
		case fault.Kill, fault.Restart:
			crash = crash || held(fr.AtNs)
		case fault.PowerLoss:
			power = power || held(fr.AtNs)
		}
	}
	return crash, power, nil
}

// logf writes a progress line.
func (c *Config) logf(format string, a ...any) {
	if c.Log != nil {
		fmt.Fprintf(c.Log, "explore: "+format+"\n", a...)
	}
}

// faultWords are a spec's faults as its log shows them.
func faultWords(s *spec.Spec) []string {
	out := make([]string, len(s.Faults))
	for i, f := range s.Faults {
		out[i] = fmt.Sprintf("t=%v %s", f.At, f.String())
	}
	return out
}

// summary is a judged outcome in one line.
func (o *Outcome) summary() string {
	switch {
	case o.Discarded != "":
		return "DISCARDED (lab not clean: " + o.Discarded + ")"
	case o.Error != "":
		return "DID NOT RUN: " + o.Error
	case o.Invalid != "":
		return "INVALID"
	}
	var harms []string
	for g, got := range o.Guards {
		for _, h := range got.Harms {
			if h != HarmUnavailable {
				harms = append(harms, g+" "+words[h])
			}
		}
	}
	slices.Sort(harms)
	if len(o.Disagreements) > 0 {
		harms = append(harms, "CHECKERS DISAGREE")
	}
	if len(harms) == 0 {
		return "no harm"
	}
	return strings.Join(harms, ", ")
}

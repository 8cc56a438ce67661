package explore

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/redlocklab/redlocklab/internal/prose"

	"github.com/redlocklab/redlocklab/infra/lab/profile"
	"github.com/redlocklab/redlocklab/internal/atomicfile"
	"github.com/redlocklab/redlocklab/inventory"
)

// Result is explore.json: a search's configuration, every schedule's
// outcome, the rates, the properties and the findings. Package explore
// is its one writer and reader (ReadResult, Merge).
type Result struct {
	Seed    uint64 `json:"seed"`
	Commit  string `json:"commit"`
	Started string `json:"started"`
	// The configuration, which runs must share to be merged.
	Families    []string        `json:"families"`
	Guards      []string        `json:"guards"`
	Lab         profile.Profile `json:"lab"`
	Shape       Shape           `json:"shape"`
	Unavailable float64         `json:"unavailable_threshold"`
	// Sources are the runs a merged result adds up (their seeds); empty
	// for a run.
	Sources []string `json:"sources,omitempty"`

	Schedules []*Outcome `json:"schedules"`
	// Ran are the schedules that ran (judged or invalid); Judged those
	// judged; Invalid, Discarded and Errors the others.
	Ran       int `json:"ran"`
	Judged    int `json:"judged"`
	Invalid   int `json:"invalid"`
	Discarded int `json:"discarded"`
	Errors    int `json:"errors"`
	// SearchS is the search's wall time, shrinking aside; PerHour the
	// schedules that ran per hour of it.
	SearchS      float64 `json:"search_s"`
	PerHour      float64 `json:"schedules_per_hour"`
	LabsReplaced int     `json:"labs_replaced,omitempty"`

	Rates      *Rates           `json:"rates"`
	Properties []PropertyResult `json:"properties"`
	// Verdict is "conclusive", "inconclusive" (no property reached) or
	// "invalid" (most schedules could not be judged).
	Verdict string `json:"verdict"`
	// Disagreements count the schedules whose two checkers disagreed.
	Disagreements int       `json:"disagreements"`
	Findings      []Finding `json:"findings,omitempty"`
	// ShrinkS is the shrinking's wall time.
	ShrinkS float64 `json:"shrink_s,omitempty"`

	cfg *Config
}

// PropertyResult is a property and the schedules that reached it.
type PropertyResult struct {
	Property
	Reached bool `json:"reached"`
	// Schedules are the first schedules that reached it.
	Schedules []int `json:"schedules,omitempty"`
}

// Finding is a failing schedule shrunk to a runbook.
type Finding struct {
	// Schedule is the schedule it came from; Guard and Harm what failed.
	Schedule string `json:"schedule"`
	Guard    string `json:"guard"`
	Harm     Harm   `json:"harm"`
	// Before and After are the faults before and after shrinking, and
	// Guards the guards the shrunk schedule runs.
	Before []string `json:"before"`
	After  []string `json:"after"`
	Guards []string `json:"guards"`
	// Reproduced of Runs is how often the shrunk schedule failed the same
	// way in its last replays.
	Reproduced int `json:"reproduced"`
	Runs       int `json:"runs"`
	// Steps are the candidates shrinking kept.
	Steps int `json:"steps"`
	// Runbook is the written runbook.
	Runbook string  `json:"runbook"`
	TookS   float64 `json:"took_s"`
	// Note says why shrinking stopped where it did.
	Note string `json:"note,omitempty"`
}

func newResult(c *Config) *Result {
	r := &Result{
		Seed: c.Seed, Commit: c.Commit, Started: time.Now().UTC().Format(time.RFC3339),
		Families: slices.Clone(c.Families), Guards: guardNames(c.Guards), Lab: c.Lab, Shape: c.Shape, Unavailable: c.Unavailable,
		cfg: c,
	}
	r.Rates = NewRates(r.Guards)
	return r
}

func guardNames(gs []inventory.Guard) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = string(g)
	}
	return out
}

// add records a schedule's outcome.
func (r *Result) add(o *Outcome) {
	r.Schedules = append(r.Schedules, o)
	switch {
	case o.Discarded != "":
		r.Discarded++
	case o.Error != "":
		r.Errors++
	case o.Invalid != "":
		r.Ran++
		r.Invalid++
	default:
		r.Ran++
		r.Judged++
		r.Rates.Add(o)
		if len(o.Disagreements) > 0 {
			r.Disagreements++
		}
	}
}

// finish computes the figures, the properties and the verdict.
func (r *Result) finish() {
	if r.SearchS > 0 {
		r.PerHour = float64(r.Ran) / r.SearchS * 3600
	}
	var props []Property
	if r.cfg != nil {
		props = r.cfg.Properties()
	}
	r.Properties = r.Properties[:0]
	for _, p := range props {
		pr := PropertyResult{Property: p}
		for _, o := range r.Schedules {
			if o.Judged() && p.reached(o) {
				pr.Reached = true
				if len(pr.Schedules) < 10 {
					pr.Schedules = append(pr.Schedules, o.Index)
				}
			}
		}
		r.Properties = append(r.Properties, pr)
	}
	r.Verdict = r.verdict()
}

func (r *Result) verdict() string {
	if r.cfg != nil && r.Ran > 0 && float64(r.Invalid) > r.cfg.MaxInvalid*float64(r.Ran) {
		return "invalid"
	}
	for _, p := range r.Properties {
		if p.Reached {
			return "conclusive"
		}
	}
	return "inconclusive"
}

// Problem says why the search does not stand, or "": most schedules
// invalid, no property reached, no schedule judged, checkers that
// disagreed.
func (r *Result) Problem() string {
	switch {
	case r.Judged == 0:
		return fmt.Sprintf("no schedule could be judged (%d ran, %d invalid, %d discarded, %d did not run)", r.Ran, r.Invalid, r.Discarded, r.Errors)
	case r.Verdict == "invalid":
		return fmt.Sprintf("%d of %d schedules were invalid: the host could not keep the load's schedule; run the search on a quieter machine", r.Invalid, r.Ran)
	case r.Verdict == "inconclusive" && len(r.Properties) == 0:
		return fmt.Sprintf("inconclusive: the fault families %s imply no state a search must reach (latency slows a lock but breaks none): nothing tells that the search went where the danger is", joinStrings(r.Families))
	case r.Verdict == "inconclusive":
		var names []string
		for _, p := range r.Properties {
			names = append(names, p.Name)
		}
		return fmt.Sprintf("inconclusive: in %d judged schedules the search reached none of %s: its faults never went where the danger is; search longer, or with other families", r.Judged, strings.Join(names, "; "))
	case r.Disagreements > 0:
		return fmt.Sprintf("the two checkers of the protected resource disagreed in %d schedules: one of them is wrong", r.Disagreements)
	}
	return ""
}

// write writes explore.json and report.html into dir.
func (r *Result) write(dir string) error {
	if err := atomicfile.WriteJSON(filepath.Join(dir, ResultFile), r, 0o644); err != nil {
		return fmt.Errorf("explore: %w", err)
	}
	return r.writeHTML(filepath.Join(dir, ReportFile))
}

// ReadResult reads an explore.json.
func ReadResult(path string) (*Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("explore: %w", err)
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("explore: %s: %w", path, err)
	}
	if r.Rates == nil {
		return nil, fmt.Errorf("explore: %s: no rates: not an explore.json", path)
	}
	return &r, nil
}

// Merge adds up runs of one configuration (families, guards, lab, shape,
// threshold) made with other seeds or on other machines: their schedules,
// counts and rates. Runs of different configurations answer different
// questions and are refused. The properties are reached when one run
// reached them.
func Merge(runs ...*Result) (*Result, error) {
	if len(runs) == 0 {
		return nil, fmt.Errorf("explore: nothing to merge")
	}
	first := runs[0]
	key := func(r *Result) string {
		b, _ := json.Marshal([]any{r.Families, r.Guards, r.Lab, r.Shape, r.Unavailable})
		return string(b)
	}
	out := &Result{Families: first.Families, Guards: first.Guards, Lab: first.Lab, Shape: first.Shape, Unavailable: first.Unavailable,
		Started: first.Started, Commit: first.Commit, Rates: NewRates(first.Guards)}
	reached := map[string]*PropertyResult{}
	var order []string
	for _, r := range runs {
		if key(r) != key(first) {
			return nil, fmt.Errorf("explore: seed %d searched another configuration than seed %d (families, guards, lab or load differ): its rates answer another question", r.Seed, first.Seed)
		}
		out.Sources = append(out.Sources, fmt.Sprintf("seed %d, commit %s, %s", r.Seed, r.Commit, r.Started))
		out.Schedules = append(out.Schedules, r.Schedules...)
		out.Ran += r.Ran
		out.Judged += r.Judged
		out.Invalid += r.Invalid
		out.Discarded += r.Discarded
		out.Errors += r.Errors
		out.SearchS += r.SearchS
		out.ShrinkS += r.ShrinkS
		out.Disagreements += r.Disagreements
		out.Findings = append(out.Findings, r.Findings...)
		out.Rates.Merge(r.Rates)
		for _, p := range r.Properties {
			q, ok := reached[p.Name]
			if !ok {
				q = &PropertyResult{Property: p.Property}
				reached[p.Name] = q
				order = append(order, p.Name)
			}
			q.Reached = q.Reached || p.Reached
		}
	}
	for _, name := range order {
		out.Properties = append(out.Properties, *reached[name])
	}
	if out.SearchS > 0 {
		out.PerHour = float64(out.Ran) / out.SearchS * 3600
	}
	out.Verdict = "inconclusive"
	for _, p := range out.Properties {
		if p.Reached {
			out.Verdict = "conclusive"
		}
	}
	return out, nil
}

// WriteTo writes r into dir (explore.json, report.html).
func (r *Result) WriteTo(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("explore: %w", err)
	}
	return r.write(dir)
}

// WriteText writes the search's summary: the counts, the rate table, the
// properties and the findings.
func (r *Result) WriteText(w io.Writer) error {
	seeds := fmt.Sprintf("seed %d, commit %s", r.Seed, r.Commit)
	if len(r.Sources) > 0 {
		seeds = fmt.Sprintf("%d runs merged: %s", len(r.Sources), strings.Join(r.Sources, "; "))
	}
	fmt.Fprintf(w, "explore: %s\n", seeds)
	fmt.Fprintf(w, "  faults %s; guards %s; lab %s\n", joinStrings(r.Families), joinStrings(r.Guards), labWords(r.Lab))
	fmt.Fprintf(w, "  %d schedules ran in %s (%.0f per hour): %d judged, %d invalid; %d discarded (lab not clean), %d did not run\n\n",
		r.Ran, time.Duration(r.SearchS*float64(time.Second)).Round(time.Second), r.PerHour, r.Judged, r.Invalid, r.Discarded, r.Errors)
	fmt.Fprintf(w, "Schedules with each harm, of the %d judged (95%% interval):\n", r.Judged)
	if err := r.Rates.WriteText(w); err != nil {
		return err
	}
	fmt.Fprintf(w, "(unavailable: more than %s of a guard's requests found the lock unavailable)\n\n", pct(r.Unavailable))
	fmt.Fprintln(w, "Sometimes properties (states the search must reach at least once):")
	if len(r.Properties) == 0 {
		fmt.Fprintln(w, "  none: these fault families imply none")
	}
	for _, p := range r.Properties {
		mark := "NOT reached"
		if p.Reached {
			mark = fmt.Sprintf("reached (schedules %s)", prose.List(p.Schedules))
		}
		fmt.Fprintf(w, "  %-36s %s — %s\n", p.Name, mark, p.Why)
	}
	fmt.Fprintf(w, "  verdict: %s\n", r.Verdict)
	if r.Disagreements > 0 {
		fmt.Fprintf(w, "\nTHE CHECKERS DISAGREED in %d schedules: see their disagreements in %s\n", r.Disagreements, ResultFile)
	}
	if len(r.Findings) > 0 {
		fmt.Fprintln(w, "\nFindings, shrunk:")
	}
	for _, f := range r.Findings {
		switch {
		case f.Runbook == "" && len(f.After) > 0:
			fmt.Fprintf(w, "  %s: %s %s; %d → %d faults (%s), but %s\n", f.Schedule, f.Guard, words[f.Harm],
				len(f.Before), len(f.After), joinStrings(f.After), f.Note)
			continue
		case f.Runbook == "":
			fmt.Fprintf(w, "  %s: %s %s; not shrunk: %s\n", f.Schedule, f.Guard, words[f.Harm], f.Note)
			continue
		}
		fmt.Fprintf(w, "  %s: %s %s; %d → %d faults (%s); reproduced %d/%d; %s\n", f.Schedule, f.Guard, words[f.Harm],
			len(f.Before), len(f.After), joinStrings(f.After), f.Reproduced, f.Runs, f.Runbook)
	}
	return nil
}

func joinStrings(ss []string) string {
	if len(ss) == 0 {
		return "none"
	}
	return strings.Join(ss, ", ")
}

func joinGuards(gs []inventory.Guard) string { return joinStrings(guardNames(gs)) }

// labWords is a profile as people write it.
func labWords(p profile.Profile) string {
	w := fmt.Sprintf("%d nodes, persistence %s", p.Nodes, persistenceWords(p.Persistence))
	if p.NoRestartDelay {
		w += ", no restart delay"
	} else {
		w += ", restart delay " + p.RestartDelay.String()
	}
	if p.Replicas > 0 {
		w += ", a replica per node"
	}
	if p.Etcd > 0 {
		w += fmt.Sprintf(", %d etcd members", p.Etcd)
	}
	if p.TLS {
		w += ", TLS"
	}
	if p.Machines {
		w += ", machines"
	}
	if p.PowerLoss {
		w += ", the power-loss filesystem"
	}
	return w
}

func persistenceWords(ps []profile.Persistence) string {
	if u := profile.Uniform(ps); u != profile.PersistMixed {
		return string(u)
	}
	return profile.FormatPersistenceList(ps)
}

package explore

import (
	"fmt"
	"html/template"
	"os"
	"slices"
	"strings"

	"github.com/redlocklab/redlocklab/internal/prose"

	"github.com/redlocklab/redlocklab/drill/spec"
	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/lab/profile"
)

// scheduleBody is the Markdown of a schedule's runbook.
func scheduleBody(c *Config, s *spec.Spec) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\nSchedule %d of `redlab explore --seed %d` (commit %s), drawn from the fault families %s.\n",
		s.Name, indexOf(s.Name), c.Seed, c.Commit, joinStrings(c.Families))
	fmt.Fprintf(&b, "Its expectations state safety for every guard; replay it with `redlab drill %s.md`.\n", s.Name)
	return b.String()
}

// foundBody is the Markdown of a shrunk finding's runbook: what failed,
// the schedule before and after shrinking, how often it reproduced, and
// what the seed's debate says of it.
func foundBody(c *Config, found, out *spec.Spec, f Finding) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", out.Title)
	fmt.Fprintf(&b, "Found by `redlab explore --seed %d` (commit %s) in schedule %d (%s), on a lab of %s, and shrunk from %d faults to %d.\n\n",
		c.Seed, c.Commit, indexOf(found.Name), found.Name, labWords(out.Lab), len(f.Before), len(f.After))
	fmt.Fprintf(&b, "## What failed\n\n`%s` showed **%s** (`%s`): %s\n\n", f.Guard, words[f.Harm], harmExpectation(f.Harm, out.Lab.Nodes).Expr, harmMeaning[f.Harm])
	fmt.Fprintf(&b, "The shrunk schedule failed the same way in **%d of %d** replays when it was written.\n\n", f.Reproduced, f.Runs)
	b.WriteString("## The schedule\n\nAs the search drew it:\n\n")
	for _, w := range f.Before {
		fmt.Fprintf(&b, "- %s\n", w)
	}
	fmt.Fprintf(&b, "\nGuards: %s.\n\nAfter shrinking (%d steps kept):\n\n", joinStrings(guardNames(found.Workload.Guards)), f.Steps)
	for _, w := range f.After {
		fmt.Fprintf(&b, "- %s\n", w)
	}
	fmt.Fprintf(&b, "\nGuards: %s. Load: %g reservations per second per guard for %v, lock TTL %v, over %d SKUs.\n",
		joinStrings(f.Guards), out.Workload.Rate, out.Workload.Duration, out.Workload.LockTTL, out.Workload.Keys.N)
	if f.Note != "" {
		fmt.Fprintf(&b, "\n%s.\n", f.Note)
	}
	fmt.Fprintf(&b, "\n## Replay\n\n```sh\nredlab drill %s --repeat 5\n```\n\nIt prints how many of the five replays reproduced the failure.\n", f.Runbook)
	b.WriteString("\n## In the seed's terms\n\n")
	b.WriteString(seedTerms(out, f))
	return b.String()
}

// harmMeaning says what each harm means for the protected data.
var harmMeaning = map[Harm]string{
	HarmLockViolation: "two holders held the lock at once, both still inside the validity their lock client computed. This is a failure of the lock itself, not of a holder that ran late.",
	HarmLostUpdate:    "the store's audit found units sold twice (initial − final ≠ Σ ledger), and the model checker found no order of the reservations that explains the stock.",
	HarmDoubleGrant:   "two holders held the lock at once.",
	HarmUnavailable:   "the lock could not be taken.",
}

// seedTerms says what the seed article's debate (§7.1 Kleppmann, §7.3
// antirez, §8 the common mistakes) says of the finding's faults and lab.
func seedTerms(out *spec.Spec, f Finding) string {
	var b strings.Builder
	kinds := map[fault.Kind]bool{}
	for _, x := range out.Faults {
		kinds[x.Kind] = true
	}
	p := out.Lab
	unsafeDisk := slices.ContainsFunc(p.Persistence, func(x profile.Persistence) bool { return x != profile.PersistAlways })
	noDelay := p.NoRestartDelay || p.RestartDelay < out.Workload.LockTTL
	if kinds[fault.PowerLoss] || kinds[fault.Kill] || kinds[fault.Restart] {
		switch {
		case unsafeDisk && noDelay:
			b.WriteString("The seed's §8 lists, among the common mistakes, persistence without `fsync=always` or without a delayed restart: \"Un redémarrage de nœud et la perte de la clé peuvent faire en sorte que deux clients atteignent le quorum\" (a node's restart and the loss of the key can let two clients reach the quorum). This lab breaks both rules, and the schedule shows the consequence. antirez's rule, quoted there, is that a restarted node waits at least the longest TTL before it rejoins.\n\n")
		case noDelay:
			b.WriteString("This lab restarts a crashed node within the lock's TTL, against antirez's rule in the seed's §8 (a restarted node waits at least the longest TTL), though it fsyncs every write.\n\n")
		case unsafeDisk:
			b.WriteString("This lab does not fsync every write (the seed's §8: `fsync=always`), though it delays a restart past the TTL.\n\n")
		}
	}
	if kinds[fault.ClockJump] || kinds[fault.ClockRate] {
		b.WriteString("Kleppmann's second argument (the seed's §7.1, \"Dépendance à l'horloge\"): a node whose clock jumps or runs fast expires a key early, and two clients can both hold a quorum. antirez's answer (§7.3) is operational: NTP in slew mode, no manual change of the time. The lab models the step on Redis's key expiry; etcd's leases run on a monotonic clock and are not moved.\n\n")
	}
	if kinds[fault.ClientPause] {
		b.WriteString("Kleppmann's first argument (§7.1): a holder that pauses past its TTL meets the next holder, and no TTL lock prevents it; only a fencing token checked by the storage (§7.2) keeps the data.\n\n")
	}
	if kinds[fault.Failover] {
		b.WriteString("The seed's §2 scenario, and the first mistake of §8: replicas used as Redlock's nodes. Replication is asynchronous, so a promoted replica can lack a granted lock.\n\n")
	}
	if kinds[fault.Partition] || kinds[fault.Pause] || kinds[fault.Latency] {
		b.WriteString("Partitions, frozen servers and slow replies cost Redlock availability, not safety, as long as a lock's validity accounts for the time its acquisition took (§3, and antirez in §7.3). ")
		if f.Harm == HarmLockViolation {
			b.WriteString("Here they took part in a lock violation: read the schedule's history before drawing a conclusion.")
		}
		b.WriteString("\n\n")
	}
	if b.Len() == 0 {
		b.WriteString("The seed's debate names no rule this schedule breaks: it is something nobody scripted. Read its history.jsonl and history.html.\n")
	}
	return b.String()
}

// writeHTML writes the search's page.
func (r *Result) writeHTML(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("explore: %w", err)
	}
	type cell struct {
		Text, Class string
	}
	type row struct {
		Guard string
		N     int
		Cells []cell
	}
	var rows []row
	for _, g := range r.Rates.Guards {
		rw := row{Guard: g}
		for _, h := range Harms {
			rate := r.Rates.ByGuard[g][h]
			rw.N = max(rw.N, rate.N)
			class := "none"
			if rate.K > 0 {
				class = "some"
			}
			rw.Cells = append(rw.Cells, cell{Text: rate.String(), Class: class})
		}
		rows = append(rows, rw)
	}
	var heads []string
	for _, h := range Harms {
		heads = append(heads, words[h])
	}
	err = reportTmpl.Execute(f, map[string]any{"R": r, "Rows": rows, "Heads": heads, "Lab": labWords(r.Lab),
		"Families": joinStrings(r.Families), "Threshold": pct(r.Unavailable), "Problem": r.Problem()})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("explore: %s: %w", path, err)
	}
	return nil
}

var reportTmpl = template.Must(template.New("explore").Funcs(template.FuncMap{
	"join":   joinStrings,
	"ints":   prose.List[int],
	"harm":   func(h Harm) string { return words[h] },
	"hasAny": func(o *Outcome) bool { return o.Failing() },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>redlab explore, seed {{.R.Seed}}</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}
table{border-collapse:collapse;margin:.5em 0 1.5em}th,td{border:1px solid #ccc;padding:.35em .6em;vertical-align:top;text-align:left}
th{background:#f4f4f4}td.some{background:#fde8e8}td.none{background:#eef8ee}
.bad{color:#b00;font-weight:600}.muted{color:#666}tr.failing td{background:#fff3f3}code{font-size:13px}
</style></head><body>
<h1>redlab explore{{if .R.Sources}} (merged){{else}}, seed {{.R.Seed}}{{end}}</h1>
<p>{{if .R.Sources}}{{range .R.Sources}}{{.}}<br>{{end}}{{else}}Commit <code>{{.R.Commit}}</code>, started {{.R.Started}}.{{end}}
Fault families: {{.Families}}. Lab: {{.Lab}}. Load per schedule: {{.R.Shape.Rate}} reservations/s per guard for {{.R.Shape.Duration}}, lock TTL {{.R.Shape.LockTTL}}, {{.R.Shape.Keys}} SKUs per guard.</p>
<p><b>{{.R.Ran}}</b> schedules ran ({{printf "%.0f" .R.PerHour}} per hour): {{.R.Judged}} judged, {{.R.Invalid}} invalid (the host could not keep the load's schedule before the first fault); {{.R.Discarded}} discarded because the lab was not clean before them; {{.R.Errors}} did not run.</p>
{{if .Problem}}<p class="bad">{{.Problem}}</p>{{end}}
<h2>Rates</h2>
<p>Per guard, the judged schedules that showed each harm, with a 95 % Wilson interval. Unavailable: more than {{.Threshold}} of the guard's requests found the lock unavailable.</p>
<table><tr><th>guard</th><th>judged</th>{{range .Heads}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr><td><code>{{.Guard}}</code></td><td>{{.N}}</td>{{range .Cells}}<td class="{{.Class}}">{{.Text}}</td>{{end}}</tr>{{end}}
</table>
<h2>Sometimes properties</h2>
<p>States the search must reach at least once, or its faults never went where the danger is. Verdict: <b>{{.R.Verdict}}</b>.</p>
<table><tr><th>property</th><th>reached</th><th>why</th></tr>
{{range .R.Properties}}<tr><td>{{.Name}}</td><td>{{if .Reached}}yes (schedules {{ints .Schedules}}){{else}}<span class="bad">no</span>{{end}}</td><td>{{.Why}}</td></tr>{{else}}<tr><td colspan="3">none: these fault families imply none</td></tr>{{end}}
</table>
{{if .R.Findings}}<h2>Findings, shrunk</h2>
<table><tr><th>from</th><th>what</th><th>faults after shrinking</th><th>reproduced</th><th>runbook</th></tr>
{{range .R.Findings}}<tr><td>{{.Schedule}}</td><td><code>{{.Guard}}</code> {{harm .Harm}}</td><td>{{range .After}}{{.}}<br>{{end}}{{if .Note}}<span class="muted">{{.Note}}</span>{{end}}</td><td>{{.Reproduced}}/{{.Runs}}</td><td>{{if .Runbook}}<code>{{.Runbook}}</code>{{end}}</td></tr>{{end}}
</table>{{end}}
<h2>Schedules</h2>
<table><tr><th>#</th><th>faults</th><th>outcome</th><th>links</th></tr>
{{range .R.Schedules}}<tr{{if hasAny .}} class="failing"{{end}}><td>{{.Index}}</td><td>{{range .Faults}}{{.}}<br>{{end}}</td><td>{{if .Discarded}}discarded: {{.Discarded}}{{else if .Error}}<span class="bad">did not run: {{.Error}}</span>{{else if .Invalid}}INVALID: {{.Invalid}}{{else}}{{range $g, $o := .Guards}}{{if $o.Harms}}<code>{{$g}}</code>: {{range $o.Harms}}{{harm .}}; {{end}}<br>{{end}}{{end}}{{range .Disagreements}}<span class="bad">checkers disagree: {{.}}</span><br>{{end}}{{end}}</td>
<td><a href="{{.Spec}}">spec</a>{{if .HistoryHTML}} · <a href="{{.HistoryHTML}}">history.html</a>{{end}}</td></tr>{{end}}
</table>
</body></html>
`))

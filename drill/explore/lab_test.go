package explore

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redlocklab/redlocklab/drill"
	"github.com/redlocklab/redlocklab/drill/spec"
	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

// TestExploreOnLab runs a short search on a real lab, as CI does: three
// schedules of a fixed seed against every default guard, on one lab that
// is reset between them. It checks the output (explore.json, report.html,
// every schedule's runbook and result), that the runbooks are exactly the
// seed's draws (the same seed, the same schedules), that every guard was
// judged by both checkers and that they agreed.
func TestExploreOnLab(t *testing.T) {
	bin, tf := testenv.RequireLab(t, lab.FindTerraform)
	out := t.TempDir()
	c := DefaultConfig()
	c.Seed, c.MaxSchedules, c.Budget, c.Shrink = 3, 3, 0, false
	c.Out, c.Found = out, filepath.Join(out, "found")
	c.Commit = "test"
	c.Drill = drill.Options{Lab: lab.Config{Redlab: bin, Terraform: tf, InfraDir: "../../infra"}}
	var log bytes.Buffer
	c.Log = &log
	res, err := Run(context.Background(), c)
	if err != nil {
		t.Fatalf("explore: %v\n%s", err, log.String())
	}
	if got := res.Ran + res.Discarded + res.Errors; got != 3 {
		t.Fatalf("schedules: %d ran, %d discarded, %d did not run; want 3 in all\n%s", res.Ran, res.Discarded, res.Errors, log.String())
	}
	if res.Judged < 2 {
		t.Errorf("%d of 3 schedules judged (%d invalid): the lab of a quiet test host keeps a load of 20/s per guard\n%s", res.Judged, res.Invalid, log.String())
	}
	back, err := ReadResult(filepath.Join(out, ResultFile))
	if err != nil {
		t.Fatal(err)
	}
	if back.Seed != 3 || back.Commit != "test" || len(back.Schedules) != 3 || back.Judged != res.Judged {
		t.Errorf("explore.json: seed %d, commit %q, %d schedules, %d judged; want seed 3, commit test, 3, %d", back.Seed, back.Commit, len(back.Schedules), back.Judged, res.Judged)
	}
	for _, g := range back.Guards {
		if n := back.Rates.ByGuard[g][HarmLockViolation].N; n != res.Judged {
			t.Errorf("rates of %s: over %d schedules, want the %d judged", g, n, res.Judged)
		}
	}
	page, err := os.ReadFile(filepath.Join(out, ReportFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"seed 3", "Rates", "Sometimes properties", "redlock-fenced", "lock violations"} {
		if !bytes.Contains(page, []byte(want)) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	// The same seed draws the same schedules: what ran is what a fresh
	// draw writes, byte for byte.
	fresh := DefaultConfig()
	fresh.Seed, fresh.Out = 3, t.TempDir()
	if err := fresh.Prepare(); err != nil {
		t.Fatal(err)
	}
	for i, o := range back.Schedules {
		ran, err := os.ReadFile(filepath.Join(out, o.Spec))
		if err != nil {
			t.Fatal(err)
		}
		s, err := fresh.schedule(i)
		if err != nil {
			t.Fatal(err)
		}
		if want := s.FrontMatter(); !bytes.HasPrefix(ran, want) {
			t.Errorf("schedule %d: the runbook that ran is not the seed's draw:\n%s\nwant\n%s", i, ran, want)
		}
		if _, err := spec.ReadFile(filepath.Join(out, o.Spec)); err != nil {
			t.Errorf("schedule %d: its runbook does not read back: %v", i, err)
		}
		if !o.Judged() {
			continue
		}
		r, err := drill.ReadResult(filepath.Join(out, schedulesDir, o.Name))
		if err != nil {
			t.Fatal(err)
		}
		for g, gr := range r.Guards {
			if gr.Model == nil || !gr.Model.Agrees {
				t.Errorf("schedule %d, %s: the model checker's verdict %+v: want one that agrees with the audit", i, g, gr.Model)
			}
		}
		if len(o.Guards) != len(c.Guards) {
			t.Errorf("schedule %d: %d guards judged, want %d", i, len(o.Guards), len(c.Guards))
		}
	}
	if !strings.Contains(log.String(), "schedule 2:") {
		t.Errorf("the log does not report every schedule:\n%s", log.String())
	}
}

// TestLatencyAloneIsInconclusive: latency slows a lock but breaks none, so
// a search of latency alone implies no state it must reach, and says it is
// inconclusive rather than pass.
func TestLatencyAloneIsInconclusive(t *testing.T) {
	bin, tf := testenv.RequireLab(t, lab.FindTerraform)
	out := t.TempDir()
	c := DefaultConfig()
	c.Seed, c.MaxSchedules, c.Budget, c.Shrink = 5, 2, 0, false
	c.Families = []string{"latency"}
	c.Guards = c.Guards[:3] // redis-single, redlock, redlock-fenced: no etcd members to start
	c.Out, c.Found = out, filepath.Join(out, "found")
	c.Drill = drill.Options{Lab: lab.Config{Redlab: bin, Terraform: tf, InfraDir: "../../infra"}}
	res, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != "inconclusive" || !strings.Contains(res.Problem(), "inconclusive") || len(res.Properties) != 0 {
		t.Errorf("latency alone: verdict %q, problem %q, %d properties; want inconclusive, none implied", res.Verdict, res.Problem(), len(res.Properties))
	}
	var text bytes.Buffer
	if err := res.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "verdict: inconclusive") {
		t.Errorf("the summary does not say inconclusive:\n%s", text.String())
	}
}

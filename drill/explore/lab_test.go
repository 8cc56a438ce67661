package explore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
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
	// The built binary, as users run it (and as the drill tests run their
	// drills): a load generator slowed by the race detector cannot keep
	// seven guards' load, and the schedules would be INVALID.
	cmd := exec.Command(bin, "explore", "--seed", "3", "--schedules", "3", "--no-shrink", "--out", out, "--found", filepath.Join(out, "found"))
	cmd.Dir = testenv.RepoRoot(t)
	cmd.Env = append(os.Environ(), "REDLAB_TF="+tf)
	log, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 3) { // 3: inconclusive, which three schedules may be
		t.Fatalf("redlab explore: %v\n%s", err, log)
	}
	res, err := ReadResult(filepath.Join(out, ResultFile))
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	if got := res.Ran + res.Discarded + res.Errors; got != 3 {
		t.Fatalf("schedules: %d ran, %d discarded, %d did not run; want 3 in all\n%s", res.Ran, res.Discarded, res.Errors, log)
	}
	if res.Judged < 2 {
		var why strings.Builder
		for _, o := range res.Schedules {
			if o.Invalid != "" {
				fmt.Fprintf(&why, "%s: INVALID: %s\n", o.Name, o.Invalid)
			}
		}
		t.Errorf("%d of 3 schedules judged (%d invalid): the lab of a quiet test host keeps a load of 20/s per guard\n%s%s", res.Judged, res.Invalid, why.String(), log)
	}
	if res.Seed != 3 || res.Commit == "" || len(res.Schedules) != 3 {
		t.Errorf("explore.json: seed %d, commit %q, %d schedules; want seed 3, a commit, 3", res.Seed, res.Commit, len(res.Schedules))
	}
	if !bytes.Contains(log, []byte("seed 3")) {
		t.Errorf("the output does not name its seed:\n%s", log)
	}
	for _, g := range res.Guards {
		if n := res.Rates.ByGuard[g][HarmLockViolation].N; n != res.Judged {
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
	for i, o := range res.Schedules {
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
	if !bytes.Contains(log, []byte("schedule 2:")) {
		t.Errorf("the log does not report every schedule:\n%s", log)
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

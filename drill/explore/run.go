package explore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/redlocklab/redlocklab/drill"
	"github.com/redlocklab/redlocklab/drill/spec"
)

// Layout of the output directory.
const (
	// ResultFile is the search's record: its configuration, every
	// schedule's outcome, the rates and the properties.
	ResultFile = "explore.json"
	// ReportFile is its page.
	ReportFile = "report.html"
	// specsDir holds every schedule's runbook, schedulesDir each one's
	// drill directory, shrinkDir the shrinking's replays.
	specsDir     = "specs"
	schedulesDir = "schedules"
	shrinkDir    = "shrink"
)

// maxUnclean is how many schedules in a row may find the lab unclean
// before the search replaces the lab.
const maxUnclean = 2

// runner is a search in progress.
type runner struct {
	c    *Config
	sess *drill.Session
	res  *Result
}

// Run searches: one lab for every schedule, each drawn, proved to start on
// a clean lab, run and judged, until the budget or MaxSchedules ends it;
// then the failing ones are shrunk. It writes explore.json and report.html
// as it goes (an interrupted search keeps what it judged) and returns the
// result; an error is a search that could not run.
func Run(ctx context.Context, c Config) (*Result, error) {
	if err := c.Prepare(); err != nil {
		return nil, err
	}
	for _, d := range []string{c.Out, filepath.Join(c.Out, specsDir), filepath.Join(c.Out, schedulesDir)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("explore: %w", err)
		}
	}
	r := &runner{c: &c, res: newResult(&c)}
	c.logf("seed %d, commit %s: %s against %s; lab %s", c.Seed, c.Commit, joinStrings(c.Families), joinGuards(c.Guards), labWords(c.Lab))
	sess, err := drill.NewSession(ctx, c.Lab, c.Drill)
	if err != nil {
		return nil, fmt.Errorf("explore: %w", err)
	}
	r.sess = sess
	defer func() { r.sess.Close(context.WithoutCancel(ctx)) }()

	searchErr := r.search(ctx)
	r.res.finish()
	if werr := r.res.write(c.Out); werr != nil && searchErr == nil {
		searchErr = werr
	}
	if searchErr != nil {
		return r.res, searchErr
	}
	if c.Shrink {
		if err := r.shrinkAll(ctx); err != nil {
			return r.res, err
		}
		r.res.finish()
		if err := r.res.write(c.Out); err != nil {
			return r.res, err
		}
	}
	return r.res, nil
}

// search runs schedules until the budget or the count is spent.
func (r *runner) search(ctx context.Context) error {
	c := r.c
	began := time.Now()
	unclean := 0
	for i := 0; c.MaxSchedules == 0 || i < c.MaxSchedules; i++ {
		if c.Budget > 0 && time.Since(began) >= c.Budget {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("explore: interrupted after %d schedules: %w", i, ctx.Err())
		}
		s, err := c.schedule(i)
		if err != nil {
			return err
		}
		o := r.runSchedule(ctx, i, s)
		if o.Discarded != "" {
			unclean++
			if unclean >= maxUnclean {
				c.logf("the lab was not clean before %d schedules in a row: replacing it", unclean)
				if err := r.replaceLab(ctx); err != nil {
					return err
				}
				unclean = 0
			}
		} else {
			unclean = 0
		}
		r.res.add(o)
		r.res.SearchS = time.Since(began).Seconds()
		if err := r.res.write(c.Out); err != nil {
			return err
		}
	}
	return nil
}

// replaceLab takes the session's lab down and brings a new one up.
func (r *runner) replaceLab(ctx context.Context) error {
	r.sess.Close(ctx)
	sess, err := drill.NewSession(ctx, r.c.Lab, r.c.Drill)
	if err != nil {
		return fmt.Errorf("explore: %w", err)
	}
	r.sess = sess
	r.res.LabsReplaced++
	return nil
}

// runSchedule proves the lab clean, runs schedule i and judges it.
func (r *runner) runSchedule(ctx context.Context, i int, s *spec.Spec) *Outcome {
	c := r.c
	start := time.Now()
	o := &Outcome{Index: i, Name: s.Name, Spec: filepath.Join(specsDir, s.Name+".md"), Faults: faultWords(s)}
	defer func() {
		o.TookS = time.Since(start).Seconds()
		c.logf("schedule %d: %s — %s (%.1fs)", i, joinStrings(o.Faults), o.summary(), o.TookS)
	}()
	if err := os.WriteFile(filepath.Join(c.Out, o.Spec), spec.Format(s, scheduleBody(c, s)), 0o644); err != nil {
		o.Error = err.Error()
		return o
	}
	clean, err := r.sess.Reset(ctx)
	switch {
	case err != nil:
		o.Discarded = err.Error()
		return o
	case !clean.OK():
		o.Discarded = joinStrings(clean.Problems)
		return o
	}
	dir := filepath.Join(c.Out, schedulesDir, s.Name)
	res, err := r.sess.Run(ctx, s, dir, s.Workload.Seed)
	if err != nil {
		o.Error = err.Error()
		return o
	}
	c.outcomeOf(o, res)
	if o.Judged() {
		if o.CrashUnderLock, o.PowerUnderLock, err = underLock(dir); err != nil {
			o.Error = err.Error()
			return o
		}
	}
	if _, err := os.Stat(filepath.Join(dir, drill.HistoryHTML)); err == nil {
		o.HistoryHTML = filepath.Join(schedulesDir, s.Name, drill.HistoryHTML)
	}
	if !c.Keep && !o.Failing() {
		prune(dir)
	}
	return o
}

// prune keeps a schedule's result, history and history.html: the guards'
// load directories of a schedule with no harm are not worth their space.
func prune(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	keep := []string{drill.ResultFile, drill.HistoryFile, drill.HistoryHTML}
	for _, e := range ents {
		if !slices.Contains(keep, e.Name()) {
			os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// errInconclusive is a search that reached none of its properties.
var errInconclusive = errors.New("explore: inconclusive")

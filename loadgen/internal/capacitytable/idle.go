package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/internal/atomicfile"
	"github.com/redlocklab/redlocklab/loadgen"
)

// Idle is idle.json: the CPU the lab's processes use with no load, the
// baseline the cost table prints beside each marginal CPU.
type Idle struct {
	DurationS float64              `json:"duration_s"`
	CPUS      float64              `json:"cpu_s"`
	MsPerS    float64              `json:"cpu_ms_per_s"`
	Processes []loadgen.ProcessCPU `json:"processes"`
}

// runIdle samples the CPU of the processes of the lab in stateDir for d,
// with nothing running against it, into the file out.
func runIdle(ctx context.Context, stateDir, out string, d time.Duration, stdout io.Writer) error {
	l, err := lab.Open(stateDir)
	if err != nil {
		return err
	}
	ps, err := l.Processes(ctx)
	if err != nil {
		return err
	}
	watch := make([]loadgen.WatchedProcess, len(ps))
	for i, p := range ps {
		watch[i] = loadgen.WatchedProcess{Name: p.Name, PID: p.PID}
	}
	cpu, elapsed, err := loadgen.SampleCPU(ctx, watch, d)
	if err != nil {
		return err
	}
	idle := Idle{DurationS: elapsed.Seconds(), Processes: cpu}
	for _, p := range cpu {
		if p.Lost {
			return fmt.Errorf("idle: %s (pid %d) could not be read at the start or the end: did it restart?", p.Name, p.PID)
		}
		idle.CPUS += p.Seconds
	}
	idle.MsPerS = idle.CPUS * 1000 / idle.DurationS
	fmt.Fprintf(stdout, "idle: the lab's %d processes use %.1f ms of CPU per second with no load (%.1f s)\n", len(cpu), idle.MsPerS, idle.DurationS)
	return atomicfile.WriteJSON(out, idle, 0o644)
}

// readIdle reads an idle.json; a missing file is no baseline (ok false).
func readIdle(path string) (Idle, bool, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return Idle{}, false, nil
	}
	if err != nil {
		return Idle{}, false, err
	}
	var idle Idle
	if err := json.Unmarshal(b, &idle); err != nil {
		return Idle{}, false, fmt.Errorf("%s: %w", path, err)
	}
	return idle, true, nil
}

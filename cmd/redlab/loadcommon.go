package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"

	"github.com/redlocklab/redlocklab/loadgen"
)

// startLoad finishes the parse of `redlab load` or `redlab sweep` (name):
// --help exits 0 and a parse error is a usage error. Otherwise it silences
// go-redis and runs fn until it returns or is interrupted (see interruptible).
func startLoad(ctx context.Context, e *env, name string, parseErr error, fn func(ctx context.Context, stop <-chan struct{}) int) int {
	if errors.Is(parseErr, pflag.ErrHelp) {
		return exitOK
	}
	if parseErr != nil {
		fmt.Fprintf(e.stderr, "redlab %s: %v\n", name, parseErr)
		return exitUsage
	}
	// Per-node failures are counted in the report; go-redis' own log line
	// for every failed dial would bury the status line.
	redis.SetLogger(quietRedis{})
	return interruptible(ctx, e, name, fn)
}

// loadRig is what load and sweep set up once before their runs: the out
// directory, this worker's shard and keys, the target with its recorder,
// the generator's metrics endpoint and the status line.
type loadRig struct {
	shard   loadgen.Shard
	keys    *loadgen.KeyGen
	rec     *loadgen.Recorder
	target  loadgen.Target
	metrics *loadgen.Metrics
	status  io.Writer
	tty     bool
	close   func()
}

// setUp refuses an out directory that holds a run, creates it and builds the
// rig. On success the caller must call rig.close.
func (f *loadFlags) setUp(ctx context.Context, e *env) (*loadRig, error) {
	if err := checkOut(f.out); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return nil, err
	}
	r := &loadRig{shard: loadgen.Shard(f.worker)}
	var err error
	if r.keys, err = loadgen.KeySpec(f.keys).Generator(r.shard); err != nil {
		return nil, err
	}
	r.rec = loadgen.NewRecorder(len(f.addrs), 0)
	if r.target, err = f.newTarget(ctx, f.out, r.rec); err != nil {
		return nil, err
	}
	metrics, stopMetrics, err := f.serveMetrics(ctx, e)
	if err != nil {
		r.target.Close()
		return nil, err
	}
	r.metrics = metrics
	r.close = func() {
		stopMetrics()
		r.target.Close()
	}
	r.status, r.tty = f.status(e.stderr)
	return r, nil
}

// runSpec is one run of sched (the profile's schedule) into dir on the rig,
// judged against thresholds; command is the argv recorded in run.json.
func (f *loadFlags) runSpec(r *loadRig, dir string, profile []loadgen.Stage, sched *loadgen.Schedule, command []string, thresholds []loadgen.Threshold, stop <-chan struct{}) loadgen.RunSpec {
	return loadgen.RunSpec{
		Out: dir, Meta: f.meta(profile, command, r.target), Stock: f.stock,
		Engine: loadgen.Config{
			Schedule: sched, Target: r.target, Keys: r.keys, Quantity: loadgen.QuantitySpec(f.quantity), Seed: f.seed,
			MaxInFlight: f.maxInFlight, LateTolerance: f.lateTolerance, Interval: f.interval, Recorder: r.rec,
		},
		Status: r.status, StatusTTY: r.tty, Metrics: r.metrics, Thresholds: thresholds, Stop: stop,
	}
}

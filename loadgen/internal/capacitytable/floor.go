package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/loadgen/internal/floor"
	"github.com/redlocklab/redlocklab/redlock"
)

// The writers of the disk measurement: one, and one per lab node, as the
// five redis-servers each append to their own AOF.
var diskWriters = []int{1, 5}

// fanoutWorkers is the fan-out floor's closed loop: enough cycles in
// flight that the nodes, not the client's round trips, set the pace.
const fanoutWorkers = 64

// runDisk measures the disk under dir and records it in the floor file.
func runDisk(ctx context.Context, floorPath, dir string, d time.Duration, stdout io.Writer) error {
	var runs []floor.Disk
	for _, w := range diskWriters {
		r, err := floor.MeasureDisk(ctx, dir, w, d)
		if err != nil {
			return err
		}
		runs = append(runs, r)
		fmt.Fprintf(stdout, "disk %s: %d writer(s), %.0f appends+fdatasyncs/s in all\n", dir, w, r.SyncsPerS)
	}
	return floor.Update(floorPath, func(f *floor.File) { f.Disk = runs })
}

// runFanout measures the fan-out floor on the nodes at addrs (the lab's
// redis-servers, logged in as the redlock user of $REDLAB_CREDENTIALS
// when it is set) and records it in the floor file under appendfsync.
func runFanout(ctx context.Context, floorPath, addrs, appendfsync string, d time.Duration, stdout io.Writer) error {
	if appendfsync == "" {
		return errors.New("-fanout needs -appendfsync, the policy the nodes run with")
	}
	nodes, closeNodes, err := floorNodes(addrs)
	if err != nil {
		return err
	}
	defer closeNodes()
	r, err := floor.MeasureFanout(ctx, nodes, fanoutWorkers, d)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "fan-out floor, appendfsync %s: %.0f locks/s (%d cycles, %d errors)\n", appendfsync, r.LocksPerS, r.Cycles, r.Errors)
	return floor.Update(floorPath, func(f *floor.File) {
		if f.Fanout == nil {
			f.Fanout = map[string]floor.Fanout{}
		}
		f.Fanout[appendfsync] = r
	})
}

// runClient measures the bare client on the nodes at addrs (logged in as
// the redlock user of $REDLAB_CREDENTIALS when it is set) at rate, and
// records it in the floor file under setup.
func runClient(ctx context.Context, floorPath, addrs, setup string, rate float64, d time.Duration, stdout io.Writer) error {
	if path, fsync, ok := strings.Cut(setup, ":"); !ok || (path != "fronts" && path != "direct") || fsync == "" {
		return fmt.Errorf("-client needs -setup PATH:FSYNC with PATH fronts or direct, got %q", setup)
	}
	if rate <= 0 {
		return errors.New("-client needs -rate, the setup's knee")
	}
	nodes, closeNodes, err := floorNodes(addrs)
	if err != nil {
		return err
	}
	defer closeNodes()
	dir, err := os.MkdirTemp("", "capacity-client-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	c, err := floor.MeasureClient(ctx, nodes, dir, rate, d)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "bare client, %s, at %g/s: %.3f ms of CPU per reservation (%d operations, %d errors)\n", setup, rate, c.CPUMsPerOp, c.Ops, c.Errors)
	return floor.Update(floorPath, func(f *floor.File) {
		if f.Client == nil {
			f.Client = map[string]floor.Client{}
		}
		f.Client[setup] = c
	})
}

// runCompact rewrites the AOF of the redis-servers at addrs and waits for
// it (floor.CompactAOF), logged in as the admin user of $REDLAB_CREDENTIALS,
// which it needs: the redlock user may not run BGREWRITEAOF.
func runCompact(ctx context.Context, addrs string) error {
	if os.Getenv(lab.CredentialsEnv) == "" {
		return fmt.Errorf("-compact-aof needs $%s, the lab's credentials (its admin user)", lab.CredentialsEnv)
	}
	nodes, closeNodes, err := labNodes(addrs, func(c node.Credentials) node.User { return c.Admin }, redlock.WithNodeTimeout(5*time.Second))
	if err != nil {
		return err
	}
	defer closeNodes()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return floor.CompactAOF(ctx, nodes)
}

// floorNodes are clients of the redis-servers at addrs, logged in as the
// redlock user of $REDLAB_CREDENTIALS when it is set, with a second's
// node timeout: a slow fsync is what the floor measures, not an error.
// closeAll closes them.
func floorNodes(addrs string) (nodes []*redis.Client, closeAll func(), err error) {
	return labNodes(addrs, func(c node.Credentials) node.User { return c.Redlock },
		redlock.WithPoolSize(fanoutWorkers), redlock.WithNodeTimeout(time.Second))
}

// labNodes are clients of the redis-servers at addrs with opts, logged in
// as user's pick of $REDLAB_CREDENTIALS when it is set; closeAll closes
// them.
func labNodes(addrs string, user func(node.Credentials) node.User, opts ...redlock.NodeOption) (nodes []*redis.Client, closeAll func(), err error) {
	if path := os.Getenv(lab.CredentialsEnv); path != "" {
		c, err := node.ReadCredentials(path)
		if err != nil {
			return nil, nil, fmt.Errorf("$%s: %w", lab.CredentialsEnv, err)
		}
		u := user(c)
		opts = append(opts, redlock.WithAuth(u.Name, u.Password))
	}
	nodes = redlock.NewNodes(strings.Split(addrs, ","), opts...)
	return nodes, func() {
		for _, n := range nodes {
			n.Close()
		}
	}, nil
}

// clientCell is the generator's CPU per reservation at the knee against
// the bare client's at the same rate.
func clientCell(f *floor.File, r row) string {
	c, ok := f.Client[r.path+":"+r.fsync]
	if !ok || c.CPUMsPerOp <= 0 || r.genCPUPerReserved <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f× (of %.2f)", r.genCPUPerReserved/c.CPUMsPerOp, c.CPUMsPerOp)
}

// clientNote says under the table what the bare client is.
func clientNote(f *floor.File) string {
	// The first setup's, in a fixed order; every setup's runs as long.
	for _, setup := range slices.Sorted(maps.Keys(f.Client)) {
		c := f.Client[setup]
		scheduled := c.DurationS // the operations' schedule, without the drain or any lag
		if c.Rate > 0 && c.Ops > 0 {
			scheduled = float64(c.Ops) / c.Rate
		}
		return fmt.Sprintf("Generator ÷ bare client: the load generator's CPU per reservation at the knee (its process: the schedule, the HDR recorders, the in-process replicas with their Redlock clients and SQLite store), "+
			"against the CPU per reservation of a bare client measured in the same run at the knee's rate for %.0f s: open loop, one SET NX PX to each of the %d nodes in parallel, then one compare-and-delete to each in parallel, then one SQLite reservation transaction "+
			"(the stock's conditional UPDATE and the ledger's INSERT, as db-atomic commits it). The target is at most 1.3×. Beyond the bare client, the generator's reservation reads the request's earlier reservation and the stock's version before its write (two SQLite queries), and the generator schedules, records and writes its histograms; docs/benchmarks.md has a profile.", scheduled, c.Nodes)
	}
	return ""
}

// floorCells are the table's last three cells for a row: the disk (one
// writer / five), the fan-out floor of the row's fsync policy, and the
// knee as a share of it.
func floorCells(f *floor.File, r row) string {
	disk := "–"
	one, ok1 := f.DiskFor(diskWriters[0])
	five, ok5 := f.DiskFor(diskWriters[1])
	if ok1 && ok5 {
		disk = fmt.Sprintf("%.0f / %.0f", one.SyncsPerS, five.SyncsPerS)
	}
	fl, share := "–", "–"
	if fo, ok := f.Fanout[r.fsync]; ok && fo.LocksPerS > 0 {
		fl = fmt.Sprintf("%.0f", fo.LocksPerS)
		if fo.Errors > 0 {
			fl += fmt.Sprintf(" (%d errors)", fo.Errors)
		}
		if r.knee > 0 {
			share = fmt.Sprintf("%s/s = %.0f%%", r.kneeText(), r.knee/fo.LocksPerS*100)
		}
	}
	return fmt.Sprintf(" %s | %s | %s |", disk, fl, share)
}

// floorNote says under the table what the last three columns measured,
// from the floor file (the script measures every policy alike, so the
// first in name order speaks for all).
func floorNote(f *floor.File) string {
	var parts []string
	if policies := slices.Sorted(maps.Keys(f.Fanout)); len(policies) > 0 {
		fo := f.Fanout[policies[0]]
		parts = append(parts, fmt.Sprintf("The fan-out floor is the most lock+unlock cycles per second of the least a Redlock must do, straight to the %d redis-servers: "+
			"one SET NX PX to every node in parallel, then one compare-and-delete to every node in parallel, by %d workers back to back on fresh keys for %.0f s.",
			fo.Nodes, fo.Workers, fo.DurationS))
	}
	if len(f.Disk) > 0 {
		d := f.Disk[0]
		parts = append(parts, fmt.Sprintf("The disk is %d-byte appends, each followed by fdatasync, on the lab's data filesystem, by one writer and by five at once (their total), for %.0f s each.",
			d.RecordBytes, d.DurationS))
	}
	if len(parts) == 0 {
		return ""
	}
	return "The last three columns: " + strings.Join(parts, " ") + " With appendfsync always each lock+unlock is two fsynced writes on every node, so the disk bounds everything above it " +
		"(Redis folds the writes of one event-loop pass into one fsync, so with many clients waiting the floor may pass half the disk's rate); " +
		"with everysec the floor is the round trips and the servers' CPU."
}

package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlocklab/redlocklab/internal/redistest"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

// The redlab binary the provisioners exec (the test binary cannot stand in
// for it), built at most once per test run into TestMain's temporary
// directory, and only when a test needs it.
var (
	binDir    string
	buildOnce sync.Once
	redlabBin string
	buildErr  error
)

func TestMain(m *testing.M) {
	var err error
	binDir, err = os.MkdirTemp("", "redlab-lab-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(binDir)
	os.Exit(code)
}

func buildRedlab() (string, error) {
	buildOnce.Do(func() {
		redlabBin = filepath.Join(binDir, "redlab")
		out, err := exec.Command("go", "build", "-o", redlabBin, "github.com/redlocklab/redlocklab/cmd/redlab").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/redlab: %w\n%s", err, out)
		}
	})
	return redlabBin, buildErr
}

// requireLab returns what a real lab needs: the redlab binary and a tofu or
// terraform binary. Without redis-server or tofu/terraform the test ends by
// testenv.Missing: a failure under CI=true, a loud skip otherwise.
func requireLab(t *testing.T) (redlab, terraform string) {
	t.Helper()
	testenv.Require(t, "redis-server")
	tf, err := FindTerraform(repoRoot(t))
	if err != nil {
		testenv.Missing(t, err.Error())
	}
	bin, err := buildRedlab()
	if err != nil {
		t.Fatalf("redlab binary: %v", err)
	}
	return bin, tf
}

func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(filepath.Dir(wd)) // infra/lab -> repo
}

// labPortOffsets are a lab's port ranges relative to its base port, with
// replicas (every range a test lab may use).
var labPortOffsets = PortOffsets(1)

// freeBasePort returns a base port whose three ranges for n nodes are free
// right now, below the ephemeral port range so that they stay free until
// the lab's processes bind them.
func freeBasePort(t *testing.T, n int) int {
	t.Helper()
	return redistest.FreeStableBasePort(t, n, labPortOffsets...)
}

func portsFree(base, n int) bool { return redistest.PortsFree(base, n, labPortOffsets...) }

// labUser is the user tests log in as: the lab's admin when it has
// credentials (ACLs on), nobody for an in-process node without ACL.
func labUser(t *testing.T, l *Lab) User {
	t.Helper()
	c, err := l.Credentials()
	if errors.Is(err, ErrNoCredentials) {
		return User{}
	}
	if err != nil {
		t.Fatal(err)
	}
	return c.Admin
}

// client returns a go-redis client for node id's proxy, logged in as
// labUser, with short timeouts and no retries.
func client(t *testing.T, l *Lab, id int, timeout time.Duration) *redis.Client {
	t.Helper()
	return userClient(t, l.Nodes()[id-1].Addr, labUser(t, l), timeout)
}

// userClient returns a go-redis client for addr logged in as u.
func userClient(t *testing.T, addr string, u User, timeout time.Duration) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr: addr, DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
		MaxRetries: -1, PoolSize: 1, Username: u.Name, Password: u.Password,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// ping PINGs node id through its proxy as labUser.
func ping(t *testing.T, l *Lab, id int, timeout time.Duration) error {
	t.Helper()
	return pingAddr(l.Nodes()[id-1].Addr, labUser(t, l), timeout)
}

func pingAddr(addr string, u User, timeout time.Duration) error {
	c := redis.NewClient(&redis.Options{
		Addr: addr, DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, MaxRetries: -1, PoolSize: 1,
		Username: u.Name, Password: u.Password,
	})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

// eventually polls f until it returns nil or limit passes.
func eventually(t *testing.T, limit time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %v: %v", what, limit, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func status(t *testing.T, l *Lab, id int) NodeStatus {
	t.Helper()
	st, err := l.NodeStatus(context.Background(), id)
	if err != nil {
		t.Fatalf("status of node %d: %v", id, err)
	}
	return st
}

// The fault checks below run against any lab, in-process or provisioned.

func checkPartition(t *testing.T, l *Lab, id int) {
	t.Helper()
	ctx := context.Background()
	if err := l.Partition(ctx, id); err != nil {
		t.Fatal(err)
	}
	if st := status(t, l, id); !st.Partitioned {
		t.Errorf("partition: status %+v, want partitioned", st)
	}
	err := ping(t, l, id, 300*time.Millisecond)
	if err == nil || !isTimeout(err) || errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("partitioned node %d: got %v, want a client timeout (not refused)", id, err)
	}
	if err := l.Heal(ctx, id); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "healed node answers", func() error { return ping(t, l, id, 300*time.Millisecond) })
}

func checkLatency(t *testing.T, l *Lab, id int, add time.Duration) {
	t.Helper()
	ctx := context.Background()
	c := client(t, l, id, 5*time.Second)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Latency(ctx, id, add, 0); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// The toxic holds every reply at least add: a lower bound, not a timing.
	if got := time.Since(start); got < add {
		t.Errorf("latency %v: PING took %v, want at least %v", add, got, add)
	}
	if _, err := l.Latency(ctx, id, 0, 0); err != nil {
		t.Fatal(err)
	}
	if st := status(t, l, id); st.Latency != 0 || st.Active[FaultLatency] != "" {
		t.Errorf("latency removed: status %+v, want no latency", st)
	}
}

func checkPause(t *testing.T, l *Lab, id int, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	if _, err := l.Pause(ctx, id, d); err != nil {
		t.Fatal(err)
	}
	if st := status(t, l, id); st.State != NodePaused {
		t.Errorf("paused: state %s, want paused", st.State)
	}
	if err := ping(t, l, id, 100*time.Millisecond); !isTimeout(err) {
		t.Errorf("paused node %d: got %v, want a timeout", id, err)
	}
	eventually(t, d+10*time.Second, "paused node resumes", func() error { return ping(t, l, id, 300*time.Millisecond) })
	eventually(t, 5*time.Second, "state up after pause", func() error {
		if st := status(t, l, id); st.State != NodeUp {
			return fmt.Errorf("state %s", st.State)
		}
		return nil
	})
}

// checkKill kills the node and asserts the order of events: down right after
// the kill, in the restart delay, up only once the delay has passed.
//
// The key written just before the kill survives it exactly when the
// profile persists at all: kill -9 keeps page-cache writes.
func checkKill(t *testing.T, l *Lab, id int, delay time.Duration, persists bool) {
	t.Helper()
	ctx := context.Background()
	c := client(t, l, id, 2*time.Second)
	if err := c.Set(ctx, "lock:killed", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if persists {
		awaitAOFWritten(t, c)
	}
	before := status(t, l, id)
	killed := time.Now()
	res, err := l.Kill(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st := res.Status.State; st != NodeWaiting && st != NodeStarting {
		t.Errorf("right after kill: state %s, want waiting (the restart delay)", st)
	}
	// Only a node that answers before the delay has passed is wrong; a slow
	// machine may reach this line late, so check the order, not the clock.
	if err := ping(t, l, id, 200*time.Millisecond); err == nil && time.Since(killed) < delay {
		t.Errorf("node %d answered %v after kill, want down for the restart delay %v", id, time.Since(killed), delay)
	}
	eventually(t, delay+20*time.Second, "killed node comes back", func() error { return ping(t, l, id, 300*time.Millisecond) })
	if back := time.Since(killed); back < delay {
		t.Errorf("node %d back %v after kill, want not before the restart delay %v", id, back, delay)
	}
	n, err := client(t, l, id, 2*time.Second).Exists(ctx, "lock:killed").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got := n == 1; got != persists {
		t.Errorf("key written before kill -9: exists %v after the restart, want %v", got, persists)
	}
	after := status(t, l, id)
	if after.Restarts != before.Restarts+1 || after.RedisPID == before.RedisPID {
		t.Errorf("after kill: restarts %d pid %d, want restarts %d and a new pid (was %d)",
			after.Restarts, after.RedisPID, before.Restarts+1, before.RedisPID)
	}
}

func checkRestartOverride(t *testing.T, l *Lab, id int) {
	t.Helper()
	ctx := context.Background()
	before := status(t, l, id)
	res, err := l.Restart(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Fault == nil || res.Fault.Params["delay"] != "0s" {
		t.Errorf("restart fault: got %+v, want delay 0s recorded", res.Fault)
	}
	eventually(t, 20*time.Second, "restarted node comes back", func() error { return ping(t, l, id, 300*time.Millisecond) })
	if after := status(t, l, id); after.RedisPID == before.RedisPID {
		t.Errorf("restart: redis pid still %d, want a new process", after.RedisPID)
	}
}

// checkStopStart stops the node cleanly and starts it again; a key written
// before survives when the profile persists.
func checkStopStart(t *testing.T, l *Lab, id int, persists bool) {
	t.Helper()
	ctx := context.Background()
	c := client(t, l, id, 2*time.Second)
	if err := c.Set(ctx, "lab:stopstart", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := l.Stop(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status.State != NodeStopped || res.Status.RedisPID != 0 {
		t.Errorf("stop: status %+v, want stopped, no redis pid", res.Status)
	}
	if err := ping(t, l, id, 200*time.Millisecond); err == nil {
		t.Errorf("stopped node %d answered", id)
	}
	res, err = l.Start(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status.State != NodeUp {
		t.Errorf("start: state %s, want up", res.Status.State)
	}
	n, err := client(t, l, id, 2*time.Second).Exists(ctx, "lab:stopstart").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := n == 1, persists; got != want {
		t.Errorf("key after a clean stop/start: exists %v, want %v", got, want)
	}
}

func checkClockJump(t *testing.T, l *Lab, id int) {
	t.Helper()
	ctx := context.Background()
	c := client(t, l, id, 2*time.Second)
	if err := c.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Set(ctx, "lab:long", "1", 60*time.Second).Err())
	must(c.Set(ctx, "lab:short", "1", 3*time.Second).Err())
	must(c.Set(ctx, "lab:forever", "1", 0).Err())
	res, err := l.ClockJump(ctx, id, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.ClockJump == nil || res.ClockJump.Adjusted != 1 || res.ClockJump.Deleted != 1 {
		t.Errorf("clock jump: got %+v, want 1 adjusted, 1 deleted", res.ClockJump)
	}
	pttl, err := c.PTTL(ctx, "lab:long").Result()
	must(err)
	if pttl <= 0 || pttl > 55*time.Second {
		t.Errorf("PTTL after a 5s jump: got %v, want in (0, 55s]", pttl)
	}
	if n, _ := c.Exists(ctx, "lab:short").Result(); n != 0 {
		t.Errorf("key with 3s left after a 5s jump: still there, want expired")
	}
	if ttl, _ := c.PTTL(ctx, "lab:forever").Result(); ttl != -1 {
		t.Errorf("key without expiry: PTTL %v, want -1 (untouched)", ttl)
	}
}

func checkClockRate(t *testing.T, l *Lab, id int) {
	t.Helper()
	ctx := context.Background()
	c := client(t, l, id, 2*time.Second)
	if err := c.Set(ctx, "lab:rate", "1", 60*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := l.ClockRate(ctx, id, 3, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "clock-rate fault ends", func() error {
		fs, err := l.Faults()
		if err != nil {
			return err
		}
		for _, f := range fs {
			if f.ID == res.Fault.ID && !f.Active() {
				return nil
			}
		}
		return errors.New("still active")
	})
	// A clock at 3x for 1s runs 2s ahead; with the real second that passed
	// the key has lost at least 2s more than 1s would take.
	pttl, err := c.PTTL(ctx, "lab:rate").Result()
	if err != nil {
		t.Fatal(err)
	}
	if pttl > 58*time.Second {
		t.Errorf("PTTL after 1s at 3x: got %v, want <= 58s", pttl)
	}
}

// leftovers lists processes that still belong to the lab in dir: their
// argv mentions it or their working directory is inside it.
func leftovers(dir string) []string {
	var out []string
	for _, pid := range scanProc(func(pid int) bool {
		cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
		return strings.HasPrefix(cwd, dir) || strings.Contains(strings.Join(cmdline(pid), " "), dir)
	}) {
		out = append(out, fmt.Sprintf("%d %q", pid, cmdline(pid)))
	}
	return out
}

// checkPowerLoss writes set A, waits (everysec) until the supervisor's AOF
// sampler has seen A and more than a second has passed, writes set B and
// cuts the node's power at once. After the restart A must be there unless
// the profile is none, and B exactly when the profile is always.
//
// B is lost only if the crash follows it within the everysec window; on a
// machine too busy for that (B's write and the request took a second) the
// round proves nothing about B and is run again.
//
// A process node runs the filesystem model, which keeps what redis-server
// fsynced: checkPowerLossFS.
func checkPowerLoss(t *testing.T, l *Lab, id int, prof Persistence) {
	t.Helper()
	if !l.Machines() {
		checkPowerLossFS(t, l, id, prof)
		return
	}
	ctx := context.Background()
	for round := 1; ; round++ {
		c := client(t, l, id, 2*time.Second)
		keys := func(set string, n int) []string {
			var out []string
			for i := range n {
				out = append(out, fmt.Sprintf("lock:pl%d:%s%d", round, set, i))
			}
			return out
		}
		a, b := keys("a", 20), keys("b", 5)
		for _, k := range a {
			if err := c.Set(ctx, k, "v", time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if prof == PersistEverysec {
			awaitAOFWritten(t, c)
			size := aofIncrBytes(t, l, id)
			var seen AOFSample
			eventually(t, 10*time.Second, "the AOF sampler records set A", func() error {
				st := status(t, l, id)
				if st.AOF == nil || st.AOF.Bytes < size {
					return fmt.Errorf("sampled %+v, want >= %d bytes", st.AOF, size)
				}
				seen = *st.AOF
				return nil
			})
			// A sample with all of A is now a second old: a crash from here
			// on cuts back to it or to a later one.
			for time.Since(seen.At) <= everysecWindow {
				time.Sleep(20 * time.Millisecond)
			}
		}
		wroteB := time.Now()
		for _, k := range b {
			if err := c.Set(ctx, k, "v", time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if prof == PersistEverysec {
			// B on file: the cut, not Redis's buffer, is what loses it.
			awaitAOFWritten(t, c)
		}
		before := status(t, l, id)
		res, err := l.PowerLoss(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if res.Fault == nil || res.Fault.Kind != FaultPowerLoss || res.PowerLoss == nil || res.PowerLoss.Persistence != prof {
			t.Fatalf("power-loss result: got %+v, want a power-loss fault on a %s node", res, prof)
		}
		// A machine boots again first.
		eventually(t, 2*time.Minute, "node answers after the power loss", func() error { return ping(t, l, id, 300*time.Millisecond) })
		if after := status(t, l, id); after.RedisPID == before.RedisPID || after.Restarts != before.Restarts+1 {
			t.Errorf("after power loss: pid %d restarts %d, want a new process and restarts %d", after.RedisPID, after.Restarts, before.Restarts+1)
		}
		if prof == PersistEverysec && res.Fault.Start.Sub(wroteB) >= everysecWindow {
			if round == 3 {
				t.Fatalf("three rounds in which the power loss came a second or more after set B was written")
			}
			t.Logf("round %d: power loss %v after set B: again", round, res.Fault.Start.Sub(wroteB))
			continue
		}
		c = client(t, l, id, 2*time.Second)
		count := func(ks []string) int {
			n, err := c.Exists(ctx, ks...).Result()
			if err != nil {
				t.Fatal(err)
			}
			return int(n)
		}
		wantA, wantB := len(a), 0
		switch prof {
		case PersistAlways:
			wantB = len(b)
		case PersistNone:
			wantA = 0
		}
		if got := count(a); got != wantA {
			t.Errorf("%s: %d of %d keys written well before the power loss are there, want %d", prof, got, len(a), wantA)
		}
		if got := count(b); got != wantB {
			t.Errorf("%s: %d of %d keys written just before the power loss are there, want %d", prof, got, len(b), wantB)
		}
		pl := res.PowerLoss
		kept := "-"
		if !pl.KeptUntil.IsZero() {
			kept = res.Fault.Start.Sub(pl.KeptUntil).Round(time.Millisecond).String()
		}
		t.Logf("node %d %s: power loss %v after set B, cut %d bytes, %d commands, AOF kept as of %s before the crash",
			id, prof, res.Fault.Start.Sub(wroteB).Round(time.Millisecond), pl.CutBytes, pl.CutCommands, kept)
		if prof == PersistEverysec {
			if pl.CutCommands < int64(len(b)) || pl.CutBytes == 0 || pl.KeptUntil.IsZero() {
				t.Errorf("everysec cut: got %+v, want at least the %d writes of set B", pl, len(b))
			}
		} else if pl.CutBytes != 0 || pl.CutCommands != 0 {
			t.Errorf("%s: got %+v, want nothing cut", prof, pl)
		}
		checkFaultEnded(t, l, res.Fault.ID, map[string]string{
			"persistence": string(prof), "cut_commands": fmt.Sprint(pl.CutCommands), "cut_bytes": fmt.Sprint(pl.CutBytes),
		})
		return
	}
}

// checkPowerLossFS is checkPowerLoss on the filesystem model: set A is
// written and given time to be fsynced (everysec fsyncs within a second or
// two), set B is written and the power is cut at once. A must survive
// unless the profile never fsyncs (no-fsync) or keeps nothing (none); B
// must survive under always, and is lost under no-fsync and none. Under
// everysec B is lost or kept by whether the once-a-second fsync fell
// between its write and the cut, so it is only reported.
func checkPowerLossFS(t *testing.T, l *Lab, id int, prof Persistence) {
	t.Helper()
	ctx := context.Background()
	c := client(t, l, id, 2*time.Second)
	keys := func(set string, n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("lock:plfs:%s%d", set, i))
		}
		return out
	}
	a, b := keys("a", 20), keys("b", 5)
	for _, k := range a {
		if err := c.Set(ctx, k, "v", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if prof == PersistEverysec {
		time.Sleep(2500 * time.Millisecond) // at least one background fsync since A
	}
	for _, k := range b {
		if err := c.Set(ctx, k, "v", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	before := status(t, l, id)
	res, err := l.PowerLoss(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if res.Fault == nil || res.Fault.Kind != FaultPowerLoss || res.PowerLoss == nil || res.PowerLoss.Persistence != prof || res.PowerLoss.Model != PowerLossFilesystem {
		t.Fatalf("power-loss result: got %+v, want a power-loss fault on a %s node, filesystem model", res, prof)
	}
	eventually(t, 2*time.Minute, "node answers after the power loss", func() error { return ping(t, l, id, 300*time.Millisecond) })
	if after := status(t, l, id); after.RedisPID == before.RedisPID || after.Restarts != before.Restarts+1 {
		t.Errorf("after power loss: pid %d restarts %d, want a new process and restarts %d", after.RedisPID, after.Restarts, before.Restarts+1)
	}
	c = client(t, l, id, 2*time.Second)
	count := func(ks []string) int {
		n, err := c.Exists(ctx, ks...).Result()
		if err != nil {
			t.Fatal(err)
		}
		return int(n)
	}
	pl := res.PowerLoss
	gotA, gotB := count(a), count(b)
	t.Logf("node %d %s: after the cut %d of %d of set A, %d of %d of set B; cut %d bytes, %d writes from %v", id, prof, gotA, len(a), gotB, len(b), pl.CutBytes, pl.CutCommands, pl.CutFiles)
	wantA, wantB := len(a), len(b)
	switch prof {
	case PersistNone, PersistNoFsync:
		wantA, wantB = 0, 0
	case PersistEverysec:
		wantB = gotB
	}
	if gotA != wantA {
		t.Errorf("%s: %d of %d keys written well before the power loss are there, want %d", prof, gotA, len(a), wantA)
	}
	if gotB != wantB {
		t.Errorf("%s: %d of %d keys written just before the power loss are there, want %d", prof, gotB, len(b), wantB)
	}
	if prof == PersistAlways && (pl.CutBytes != 0 || pl.CutCommands != 0) {
		t.Errorf("always: got %+v, want nothing cut", pl)
	}
	if prof == PersistNoFsync && (pl.CutBytes == 0 || pl.CutCommands < int64(len(a)+len(b))) {
		t.Errorf("no-fsync: got %+v, want the unsynced AOF cut, at least the %d writes of sets A and B", pl, len(a)+len(b))
	}
	checkFaultEnded(t, l, res.Fault.ID, map[string]string{
		"persistence": string(prof), "model": PowerLossFilesystem, "cut_bytes": fmt.Sprint(pl.CutBytes), "cut_commands": fmt.Sprint(pl.CutCommands),
	})
}

// awaitAOFWritten waits until redis-server has written every write it
// acknowledged to its AOF. Under appendfsync everysec it acknowledges
// writes it has not written yet while a background fsync is still running
// (for up to 2 s: "postponed" AOF writes), and those are lost even by a
// kill -9; a test that wants a write on file waits for this.
func awaitAOFWritten(t *testing.T, c *redis.Client) {
	t.Helper()
	eventually(t, 10*time.Second, "AOF buffer written", func() error {
		info, err := c.Info(context.Background(), "persistence").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "aof_buffer_length:0\r\n") {
			return fmt.Errorf("%s", info)
		}
		return nil
	})
}

// aofIncrBytes is the size of node id's AOF incr files on disk now.
func aofIncrBytes(t *testing.T, l *Lab, id int) int64 {
	t.Helper()
	spec, err := LoadNodeSpec(l.StateDir(), id)
	if err != nil {
		t.Fatal(err)
	}
	conf := spec.hostConf()
	files, err := readAOFManifest(filepath.Join(conf.aofDir(), conf.aofManifest()))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, f := range files.incr {
		fi, err := os.Stat(filepath.Join(conf.aofDir(), f))
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Size()
	}
	return n
}

// checkFaultEnded waits until fault id has ended in faults.jsonl, after it
// started, with params.
func checkFaultEnded(t *testing.T, l *Lab, id string, params map[string]string) {
	t.Helper()
	eventually(t, 10*time.Second, "fault "+id+" ends", func() error {
		faults, err := l.Faults()
		if err != nil {
			return err
		}
		for _, f := range faults {
			if f.ID != id {
				continue
			}
			if f.Active() {
				return errors.New("still active")
			}
			if f.End.Before(f.Start) {
				t.Errorf("fault %s ends %v before it starts %v", id, f.End, f.Start)
			}
			for k, v := range params {
				if f.Params[k] != v {
					t.Errorf("fault %s param %s: got %q, want %q", id, k, f.Params[k], v)
				}
			}
			return nil
		}
		return errors.New("not recorded")
	})
}

// runID is a redis-server's run_id, read through c.
func runID(t *testing.T, c *redis.Client) string {
	t.Helper()
	info, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	return infoValue(info, "run_id")
}

func role(c *redis.Client) (string, error) {
	info, err := c.Info(context.Background(), "replication").Result()
	if err != nil {
		return "", err
	}
	return infoValue(info, "role"), nil
}

// awaitKeys waits until every key is on the server c talks to.
func awaitKeys(t *testing.T, c *redis.Client, what string, keys []string) {
	t.Helper()
	eventually(t, 10*time.Second, what, func() error {
		n, err := c.Exists(context.Background(), keys...).Result()
		if err != nil {
			return err
		}
		if int(n) != len(keys) {
			return fmt.Errorf("%d of %d keys", n, len(keys))
		}
		return nil
	})
}

// checkFailover runs two failovers of node id of a replicated lab. The
// first, without lag: the replica is promoted behind the node's address
// (another run_id, role master, through the same front) with a key
// written well before; the crashed original comes back after its restart
// delay and follows it. The second, with lag, swaps the roles back: keys
// written before the lag survive, keys written during it are gone.
func checkFailover(t *testing.T, l *Lab, id int, lag time.Duration) {
	t.Helper()
	ctx := context.Background()
	u := labUser(t, l)
	st := status(t, l, id)
	if st.Replica == nil || st.Replica.Promoted || !st.Replica.Synced {
		t.Fatalf("node %d before the failover: replica %+v, want a synced replica", id, st.Replica)
	}
	original := l.Nodes()[id-1].RedisAddr
	replicaAddr := st.Replica.Addr
	front := client(t, l, id, 2*time.Second)
	before := runID(t, front)
	if r, err := role(front); err != nil || r != "master" {
		t.Fatalf("front before the failover: role %q, %v; want master", r, err)
	}

	// Without lag: written well before, so on the replica by then.
	old := []string{"lock:fo:old1", "lock:fo:old2"}
	for _, k := range old {
		if err := front.Set(ctx, k, "v", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	awaitKeys(t, userClient(t, replicaAddr, u, 2*time.Second), "the replica has the keys", old)
	res, err := l.Failover(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Failover == nil || res.Failover.Promoted != replicaAddr || res.Fault == nil || res.Fault.Kind != FaultFailover {
		t.Fatalf("failover result: got %+v, want the replica %s promoted", res, replicaAddr)
	}
	// A new client: the front closed the connections to the dead master.
	front = client(t, l, id, 2*time.Second)
	if r, err := role(front); err != nil || r != "master" {
		t.Errorf("front after the failover: role %q, %v; want master", r, err)
	}
	if after := runID(t, front); after == before || after != runID(t, userClient(t, replicaAddr, u, 2*time.Second)) {
		t.Errorf("front after the failover: run_id %s (was %s), want the replica's", after, before)
	}
	if n, err := front.Exists(ctx, old...).Result(); err != nil || int(n) != len(old) {
		t.Errorf("keys written well before a failover without lag: %d of %d there (%v), want all", n, len(old), err)
	}
	checkFaultEnded(t, l, res.Fault.ID, map[string]string{"promoted": replicaAddr, "lag": "0s"})
	if st := status(t, l, id); st.Replica == nil || !st.Replica.Promoted {
		t.Errorf("status after the failover: replica %+v, want promoted", st.Replica)
	}
	// The crashed original comes back after its restart delay, as a
	// replica of the promoted one.
	eventually(t, 30*time.Second, "the original follows the promoted replica", func() error {
		st := status(t, l, id)
		if st.State != NodeUp || st.Replica == nil || !st.Replica.Synced {
			return fmt.Errorf("state %s, replica %+v", st.State, st.Replica)
		}
		if r, err := role(userClient(t, original, u, 2*time.Second)); err != nil || r != "slave" {
			return fmt.Errorf("original: role %q, %v", r, err)
		}
		return nil
	})

	// With lag: the roles swap back.
	kept, lost := []string{"lock:fo:kept1", "lock:fo:kept2"}, []string{"lock:fo:lost1", "lock:fo:lost2", "lock:fo:lost3"}
	for _, k := range kept {
		if err := front.Set(ctx, k, "v", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	awaitKeys(t, userClient(t, original, u, 2*time.Second), "the original has the kept keys", kept)
	type outcome struct {
		res FaultResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := l.Failover(ctx, id, lag)
		done <- outcome{r, err}
	}()
	eventually(t, 10*time.Second, "replication is held back", func() error {
		if st := status(t, l, id); st.Replica == nil || !st.Replica.LinkCut {
			return fmt.Errorf("replica %+v", st.Replica)
		}
		return nil
	})
	wrote := time.Now()
	for _, k := range lost {
		if err := front.Set(ctx, k, "v", time.Hour).Err(); err != nil {
			t.Fatalf("write during the lag: %v", err)
		}
	}
	if took := time.Since(wrote); took >= lag/2 {
		t.Fatalf("writing during the lag took %v of the %v lag: too slow to be sure it preceded the crash", took, lag)
	}
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	fo := o.res.Failover
	if fo == nil || fo.Promoted != original || !fo.CaughtUp || fo.LostBytes <= 0 || time.Duration(fo.Lag) != lag {
		t.Errorf("failover with lag: got %+v, want the original %s promoted, caught up before the lag, bytes lost", fo, original)
	}
	front = client(t, l, id, 2*time.Second)
	if n, err := front.Exists(ctx, kept...).Result(); err != nil || int(n) != len(kept) {
		t.Errorf("keys written before the lag: %d of %d there (%v), want all", n, len(kept), err)
	}
	if n, err := front.Exists(ctx, lost...).Result(); err != nil || n != 0 {
		t.Errorf("keys written during the lag: %d of %d there (%v), want none", n, len(lost), err)
	}
	if r, err := role(front); err != nil || r != "master" {
		t.Errorf("front after the second failover: role %q, %v; want master", r, err)
	}
	checkFaultEnded(t, l, o.res.Fault.ID, map[string]string{"promoted": original, "lag": lag.String(), "caught_up": "true"})
	eventually(t, 30*time.Second, "the replica follows again", func() error {
		st := status(t, l, id)
		if st.Replica == nil || st.Replica.Promoted || !st.Replica.Synced || st.Replica.State != NodeUp {
			return fmt.Errorf("replica %+v", st.Replica)
		}
		return nil
	})
}

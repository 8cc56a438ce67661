package lab

import (
	"context"
	"fmt"
	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/lab/profile"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/internal/faultcheck"
	"github.com/redlocklab/redlocklab/internal/proc"
	"github.com/redlocklab/redlocklab/internal/redirect"
	"github.com/redlocklab/redlocklab/internal/testenv"
	"github.com/redlocklab/redlocklab/redlock"
)

// TestLab provisions a real lab with tofu/terraform (infra/envs/local),
// runs every fault against it, reconfigures it, and tears it down twice.
func TestLab(t *testing.T) {
	redlab, tf := testenv.RequireLab(t, FindTerraform)
	const n = 3
	const delay = 2 * time.Second
	dir := filepath.Join(t.TempDir(), "lab")
	base := freeBasePort(t, n)
	infra := filepath.Join(testenv.RepoRoot(t), "infra")
	cfg := Config{Profile: profile.Profile{Nodes: n, Persistence: []Persistence{PersistAlways}, RestartDelay: delay, PowerLoss: true},
		StateDir: dir, BasePort: base,
		Redlab: redlab, Terraform: tf, InfraDir: infra,
	}
	ctx := context.Background()
	t.Cleanup(func() {
		if err := Down(context.Background(), cfg); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})

	l, err := Up(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i, node := range l.Nodes() {
		if want := fmt.Sprintf("127.0.0.1:%d", base+i+1); node.ID != i+1 || node.Addr != want {
			t.Errorf("node %d: got %+v, want id %d at %s", i+1, node, i+1, want)
		}
		if err := faultcheck.Ping(t, l, node.ID, time.Second); err != nil {
			t.Errorf("node %d through its proxy: %v", node.ID, err)
		}
	}
	for _, p := range []string{".terraform", "terraform.tfstate", ".terraform.lock.hcl"} {
		if fileExists(filepath.Join(infra, "envs", "local", p)) {
			t.Errorf("%s written into the repository tree", p)
		}
	}

	t.Run("up again is idempotent", func(t *testing.T) {
		before, err := l.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		creds, err := os.ReadFile(l.CredentialsPath())
		if err != nil {
			t.Fatal(err)
		}
		l2, err := Up(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		after, err := l2.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range before {
			if before[i].SupervisorPID != after[i].SupervisorPID || before[i].RedisPID != after[i].RedisPID {
				t.Errorf("node %d: pids %d/%d became %d/%d, want untouched", i+1,
					before[i].SupervisorPID, before[i].RedisPID, after[i].SupervisorPID, after[i].RedisPID)
			}
		}
		if again, err := os.ReadFile(l.CredentialsPath()); err != nil || string(again) != string(creds) {
			t.Errorf("credentials after a second up: %v, changed %v; want the same file", err, string(again) != string(creds))
		}
	})

	t.Run("acl", func(t *testing.T) { checkACL(t, l) })

	t.Run("kernel redirect", func(t *testing.T) { checkRedirect(t, l, base) })
	t.Run("partition", func(t *testing.T) { faultcheck.Partition(t, l, 1) })
	t.Run("latency", func(t *testing.T) { faultcheck.Latency(t, l, 2, 150*time.Millisecond) })
	t.Run("pause", func(t *testing.T) { faultcheck.Pause(t, l, 3, time.Second) })
	t.Run("clock-jump", func(t *testing.T) { faultcheck.ClockJump(t, l, 1) })
	t.Run("kill", func(t *testing.T) { faultcheck.Kill(t, l, 2, delay, true) })
	t.Run("power-loss", func(t *testing.T) { faultcheck.PowerLoss(t, l, 2, PersistAlways) })
	t.Run("restart", func(t *testing.T) { faultcheck.RestartOverride(t, l, 2) })
	t.Run("stop-start", func(t *testing.T) { faultcheck.StopStart(t, l, 3, true) })
	t.Run("clock-rate", func(t *testing.T) { faultcheck.ClockRate(t, l, 1) })

	t.Run("supervisor crash", func(t *testing.T) {
		before := faultcheck.Status(t, l, 3)
		if err := syscall.Kill(before.SupervisorPID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		proc.WaitGone(context.Background(), before.SupervisorPID, 5*time.Second)
		if !proc.Alive(before.RedisPID) {
			t.Fatalf("redis-server %d died with its supervisor, want it kept", before.RedisPID)
		}
		if _, err := Up(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		// The data directory is the power-loss filesystem, which the dead
		// supervisor served: the orphan lost its disk, so the new
		// supervisor replaces it instead of adopting it.
		faultcheck.Eventually(t, 30*time.Second, "node 3 answers after up", func() error { return faultcheck.Ping(t, l, 3, 300*time.Millisecond) })
		after := faultcheck.Status(t, l, 3)
		if after.SupervisorPID == before.SupervisorPID || after.RedisPID == before.RedisPID || proc.Alive(before.RedisPID) {
			t.Errorf("after up: supervisor %d redis %d, want a new supervisor and a new redis-server in place of %d",
				after.SupervisorPID, after.RedisPID, before.RedisPID)
		}
		if _, err := os.ReadDir(filepath.Join(node.Dir(dir, 3), "data")); err != nil {
			t.Errorf("node 3's data directory after up: %v", err)
		}
		if got := node.FindRedis(filepath.Join(node.Dir(dir, 3), "data")); len(got) != 1 {
			t.Errorf("redis-server processes for node 3: %v, want one", got)
		}
	})

	t.Run("fault log", func(t *testing.T) {
		faults, err := l.Faults()
		if err != nil {
			t.Fatal(err)
		}
		seen := map[FaultKind]int{}
		for _, f := range faults {
			seen[f.Kind]++
			if f.Active() {
				t.Errorf("fault %s still active", f.ID)
			}
		}
		for _, k := range []FaultKind{fault.Partition, fault.Latency, fault.Pause, fault.ClockJump, fault.Kill, fault.PowerLoss, fault.Restart, fault.Stop, fault.ClockRate} {
			if seen[k] == 0 {
				t.Errorf("no %s in %s", k, FaultsFile)
			}
		}
	})

	t.Run("doctor sees the persistence", func(t *testing.T) {
		checkDoctor(t, l, PersistAlways)
		c := cfg
		c.Persistence = []Persistence{PersistEverysec}
		l2, err := Up(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		sts, err := l2.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range sts {
			if st.State != node.Up || st.Persistence != PersistEverysec {
				t.Errorf("node %d after reconfiguring: %s %s, want up everysec", st.ID, st.State, st.Persistence)
			}
		}
		checkDoctor(t, l2, PersistEverysec)
	})

	if err := Down(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	checkNothingLeft(t, dir, base, n)
	if err := Down(ctx, cfg); err != nil {
		t.Errorf("down of a lab that is down: %v", err)
	}

	// Up then down once more, on the same state directory.
	cfg.Nodes = 1
	l, err = Up(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := faultcheck.Ping(t, l, 1, time.Second); err != nil {
		t.Errorf("second lab: %v", err)
	}
	// Its supervisor killed with no chance to clean up (its front's kernel
	// redirect, its redis-server): down still leaves nothing.
	sup := faultcheck.Status(t, l, 1).SupervisorPID
	if err := syscall.Kill(sup, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	proc.WaitGone(ctx, sup, 5*time.Second)
	if err := Down(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	checkNothingLeft(t, dir, base, n)
}

// checkDoctor runs redlock's node audit against the lab: appendfsync always
// passes, anything else is a warning on every node.
func checkDoctor(t *testing.T, l *Lab, p Persistence) {
	t.Helper()
	creds, err := l.Credentials()
	if err != nil {
		t.Fatal(err)
	}
	rl := redlockClient(t, l, creds.Monitor)
	rep, err := rl.Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	warned := map[int]bool{}
	for _, f := range rep.Findings {
		if f.Check == "appendfsync" && f.Severity >= redlock.Warning {
			warned[f.Node] = true
		}
	}
	for i := range l.Nodes() {
		if got, want := warned[i], p != PersistAlways; got != want {
			t.Errorf("persistence %s, node %d: appendfsync warning %v, want %v (findings %+v)", p, i+1, got, want, rep.Findings)
		}
	}
}

func checkNothingLeft(t *testing.T, dir string, base, n int) {
	t.Helper()
	if left := leftovers(dir); len(left) > 0 {
		t.Errorf("processes left after down: %v", left)
	}
	if !portsFree(base, n) {
		t.Errorf("ports of the lab still in use after down")
	}
	if fileExists(dir) {
		t.Errorf("state dir %s still there after down", dir)
	}
	if redirect.Available() == nil {
		els, err := redirect.Elements(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for id := 1; id <= n; id++ {
			if to, ok := els[base+id]; ok {
				t.Errorf("node %d's front port %d still redirected to %d after down", id, base+id, to)
			}
		}
	}
}

// TestLabProfiles provisions a lab whose nodes have different persistence
// profiles and no restart delay: each node renders and reports its own
// profile, a killed node comes back without waiting, and a power loss
// loses what its profile says.
func TestLabProfiles(t *testing.T) {
	redlab, tf := testenv.RequireLab(t, FindTerraform)
	const n = 4
	dir := filepath.Join(t.TempDir(), "lab")
	base := freeBasePort(t, n)
	profiles, err := node.ParsePersistenceList("always,everysec,none,no-fsync")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Profile: profile.Profile{Nodes: n, Persistence: profiles, NoRestartDelay: true, PowerLoss: true},
		StateDir: dir, BasePort: base,
		Redlab: redlab, Terraform: tf, InfraDir: filepath.Join(testenv.RepoRoot(t), "infra"),
	}
	ctx := context.Background()
	t.Cleanup(func() {
		if err := Down(context.Background(), cfg); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	l, err := Up(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("each node its profile", func(t *testing.T) {
		wantFsync := map[Persistence][2]string{
			PersistAlways: {"yes", "always"}, PersistEverysec: {"yes", "everysec"}, PersistNone: {"no", "always"},
			PersistNoFsync: {"yes", "no"},
		}
		sts, err := l.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		creds, err := l.Credentials()
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range profiles {
			// As the doctor reads it: the monitor user, through the proxy.
			c := faultcheck.UserClient(t, l.Nodes()[i].Addr, creds.Monitor, 2*time.Second)
			got, err := c.ConfigGet(ctx, "append*").Result()
			if err != nil {
				t.Fatal(err)
			}
			if w := wantFsync[p]; got["appendonly"] != w[0] || got["appendfsync"] != w[1] {
				t.Errorf("node %d (%s): appendonly %q appendfsync %q, want %q %q", i+1, p, got["appendonly"], got["appendfsync"], w[0], w[1])
			}
			if v, _ := c.ConfigGet(ctx, "aof-load-truncated").Result(); v["aof-load-truncated"] != "yes" {
				t.Errorf("node %d: aof-load-truncated %q, want yes (a partial last command is dropped on load)", i+1, v["aof-load-truncated"])
			}
			if sts[i].Persistence != p {
				t.Errorf("node %d status: persistence %s, want %s", i+1, sts[i].Persistence, p)
			}
		}
		if got := l.NodePersistence(); node.FormatPersistenceList(got) != "always,everysec,none,no-fsync" || l.Persistence() != "mixed" {
			t.Errorf("lab: node persistence %v, persistence %s; want always,everysec,none,no-fsync and mixed", got, l.Persistence())
		}
		reopened, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := reopened.Config(); node.FormatPersistenceList(got.Persistence) != "always,everysec,none,no-fsync" || !got.NoRestartDelay || got.RestartDelay != 0 || got.Nodes != n {
			t.Errorf("lab.json: config %+v, want the four profiles, no restart delay, %d nodes", got, n)
		}
	})

	t.Run("kill with no restart delay", func(t *testing.T) {
		const zeroWait = "restart-guard: holding Redis back for 0s: last stop was 'unclean'"
		logPath := filepath.Join(node.Dir(dir, 1), "supervisor.log")
		guardLog := func() string {
			b, err := os.ReadFile(logPath)
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
		before := strings.Count(guardLog(), zeroWait)
		if _, err := l.Kill(ctx, 1); err != nil {
			t.Fatal(err)
		}
		faultcheck.Eventually(t, 20*time.Second, "killed node back", func() error { return faultcheck.Ping(t, l, 1, 300*time.Millisecond) })
		log := guardLog()
		if got := strings.Count(log, zeroWait); got != before+1 {
			t.Errorf("guard log lines %q: got %d more, want 1\n%s", zeroWait, got-before, tail(log, 2000))
		}
		if strings.Contains(log, "holding Redis back for 0.") || regexp.MustCompile(`holding Redis back for [1-9]`).MatchString(log) {
			t.Errorf("the guard held the node back for a delay:\n%s", tail(log, 2000))
		}
		if b, _ := os.ReadFile(filepath.Join(node.Dir(dir, 1), "guard", "last-stop")); strings.TrimSpace(string(b)) != "running" {
			t.Errorf("guard state after the restart: %q, want running", b)
		}
	})

	t.Run("power-loss everysec", func(t *testing.T) { faultcheck.PowerLoss(t, l, 2, PersistEverysec) })
	t.Run("power-loss always", func(t *testing.T) { faultcheck.PowerLoss(t, l, 1, PersistAlways) })
	t.Run("power-loss none", func(t *testing.T) { faultcheck.PowerLoss(t, l, 3, PersistNone) })
	t.Run("power-loss no-fsync", func(t *testing.T) { faultcheck.PowerLoss(t, l, 4, PersistNoFsync) })

	t.Run("one profile for all again", func(t *testing.T) {
		c := l.Config()
		c.Persistence = []Persistence{PersistEverysec}
		l2, err := Up(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		sts, err := l2.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range sts {
			if st.Persistence != PersistEverysec || st.State != node.Up {
				t.Errorf("node %d: %s %s, want up everysec", st.ID, st.State, st.Persistence)
			}
		}
		if l2.Persistence() != PersistEverysec {
			t.Errorf("lab persistence %s, want everysec", l2.Persistence())
		}
	})
}

// checkACL checks that the lab runs with the ACL a real node has: nobody
// gets in without a password, the redlock user can do what the library
// sends and nothing else, the monitor user reads, and the credentials file
// is private.
func checkACL(t *testing.T, l *Lab) {
	t.Helper()
	ctx := context.Background()
	fi, err := os.Stat(l.CredentialsPath())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v, want 0600", node.CredentialsFile, fi.Mode().Perm())
	}
	creds, err := node.ReadCredentials(l.CredentialsPath())
	if err != nil {
		t.Fatal(err)
	}
	// Only the credentials file holds a password: not the Terraform state or
	// log, not redis.conf (hashes only), not a node's spec or logs.
	err = filepath.WalkDir(l.StateDir(), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || p == l.CredentialsPath() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil // a pid file gone meanwhile
		}
		for _, u := range []User{creds.Redlock, creds.Monitor, creds.Admin} {
			if strings.Contains(string(b), u.Password) {
				t.Errorf("%s holds %s's password", p, u.Name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// The library, through the proxies: acquire, extend, release. Each
	// returns once a quorum answered, so a quorum is what is checked; Close
	// waits for the releases still in flight.
	rl := redlockClient(t, l, creds.Redlock)
	lock, err := rl.TryAcquire(ctx, "lock:acl", 10*time.Second)
	if err != nil {
		t.Fatalf("acquire as redlock: %v", err)
	}
	if err := lock.Extend(ctx, 20*time.Second); err != nil {
		t.Errorf("extend as redlock: %v", err)
	}
	extended := 0
	for i := range l.Nodes() {
		if pttl, err := faultcheck.Client(t, l, i+1, 2*time.Second).PTTL(ctx, "lock:acl").Result(); err == nil && pttl > 10*time.Second {
			extended++
		}
	}
	if extended < rl.Quorum() {
		t.Errorf("PTTL above 10s after extending to 20s on %d nodes, want at least a quorum of %d", extended, rl.Quorum())
	}
	if err := lock.Release(ctx); err != nil {
		t.Errorf("release as redlock: %v", err)
	}
	rl.Close()
	for i := range l.Nodes() {
		if n, err := faultcheck.Client(t, l, i+1, 2*time.Second).Exists(ctx, "lock:acl").Result(); err != nil || n != 0 {
			t.Errorf("node %d after release: exists %d, %v; want the lock gone", i+1, n, err)
		}
	}

	addr := l.Nodes()[0].Addr
	lockUser := faultcheck.UserClient(t, addr, creds.Redlock, 2*time.Second)
	monitor := faultcheck.UserClient(t, addr, creds.Monitor, 2*time.Second)
	// An extend that re-acquires a lost key: SET NX PX inside the script.
	const reacquire = `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("PEXPIRE", KEYS[1], ARGV[2]) end
if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then return 1 end
return 0`
	allowed := []struct {
		name string
		run  func() error
	}{
		{"redlock PING", func() error { return lockUser.Ping(ctx).Err() }},
		{"redlock SET lock:k NX PX", func() error { return lockUser.SetNX(ctx, "lock:k", "tok", 5*time.Second).Err() }},
		{"redlock extend script with SET NX PX on a missing key", func() error {
			return redis.NewScript(reacquire).Run(ctx, lockUser, []string{"lock:missing"}, "tok", 5000).Err()
		}},
		{"monitor CONFIG GET", func() error { return monitor.ConfigGet(ctx, "appendfsync").Err() }},
		{"monitor INFO", func() error { return monitor.Info(ctx, "persistence").Err() }},
	}
	for _, a := range allowed {
		if err := a.run(); err != nil {
			t.Errorf("%s: got %v, want it allowed", a.name, err)
		}
	}
	denied := []struct {
		name string
		run  func() error
	}{
		{"redlock SET foo bar", func() error { return lockUser.Set(ctx, "foo", "bar", 0).Err() }},
		{"redlock FLUSHALL", func() error { return lockUser.FlushAll(ctx).Err() }},
		{"redlock script writing foo", func() error {
			return lockUser.Eval(ctx, `return redis.call("SET", "foo", "bar")`, []string{"lock:k"}).Err()
		}},
		{"monitor SET lock:k", func() error { return monitor.Set(ctx, "lock:k", "x", 0).Err() }},
		{"anonymous PING", func() error { return faultcheck.UserClient(t, addr, User{}, 2*time.Second).Ping(ctx).Err() }},
		{"redlock with a wrong password", func() error {
			return faultcheck.UserClient(t, addr, User{Name: node.UserRedlock, Password: "wrong-password-000"}, 2*time.Second).Ping(ctx).Err()
		}},
	}
	for _, d := range denied {
		err := d.run()
		scriptDenied := redis.HasErrorPrefix(err, "The user executing the script can't")
		if !redis.IsPermissionError(err) && !redis.IsAuthError(err) && !scriptDenied {
			t.Errorf("%s: got %v, want it denied (NOPERM, NOAUTH/WRONGPASS or a script ACL error)", d.name, err)
		}
	}
}

// redlockClient returns a redlock.Client over the lab's proxies, logged in
// as u; it and its node clients are closed when the test ends.
func redlockClient(t *testing.T, l *Lab, u User) *redlock.Client {
	t.Helper()
	nodes := redlock.NewNodes(l.Addrs(), redlock.WithNodeTimeout(2*time.Second), redlock.WithAuth(u.Name, u.Password))
	rl, err := redlock.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rl.Close()
		for _, n := range nodes {
			n.Close()
		}
	})
	return rl
}

// TestLabReplicas provisions a replicated lab (one asynchronous replica per
// node, the topology Redlock's docs warn against): the replicas follow,
// the node audit calls every node critical, a failover promotes a replica
// behind the node's address with the same ACL users, and down leaves
// nothing of the five port ranges.
func TestLabReplicas(t *testing.T) {
	redlab, tf := testenv.RequireLab(t, FindTerraform)
	const n = 3
	dir := filepath.Join(t.TempDir(), "lab")
	base := freeBasePort(t, n)
	cfg := Config{Profile: profile.Profile{Nodes: n, Persistence: []Persistence{PersistAlways}, RestartDelay: time.Second, Replicas: 1},
		StateDir: dir, BasePort: base,
		Redlab: redlab, Terraform: tf, InfraDir: filepath.Join(testenv.RepoRoot(t), "infra"),
	}
	ctx := context.Background()
	t.Cleanup(func() {
		if err := Down(context.Background(), cfg); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	l, err := Up(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if l.Replicas() != 1 {
		t.Errorf("lab replicas: got %d, want 1", l.Replicas())
	}
	for i, node := range l.Nodes() {
		want := fmt.Sprintf("127.0.0.1:%d", base+replicaPortOffset+i+1)
		if node.ReplicaAddr != want || node.ReplicaLink != fmt.Sprintf("127.0.0.1:%d", base+replicaLinkOffset+i+1) {
			t.Errorf("node %d: got %+v, want its replica on %s", i+1, node, want)
		}
		if st := faultcheck.Status(t, l, node.ID); st.Replica == nil || !st.Replica.Synced || st.Replica.Addr != want {
			t.Errorf("node %d: replica status %+v, want synced on %s", node.ID, st.Replica, want)
		}
	}
	creds, err := l.Credentials()
	if err != nil {
		t.Fatal(err)
	}

	t.Run("doctor calls replicated nodes critical", func(t *testing.T) {
		rep, err := redlockClient(t, l, creds.Monitor).Check(ctx)
		if err != nil {
			t.Fatal(err)
		}
		critical := map[int]bool{}
		for _, f := range rep.Findings {
			if f.Check == "replicas" && f.Severity == redlock.Critical && strings.Contains(f.Fix, "not an independent node") {
				critical[f.Node] = true
			}
		}
		if len(critical) != n {
			t.Errorf("nodes with a critical replicas finding: %v, want all %d (findings %+v)", critical, n, rep.Findings)
		}
	})

	t.Run("failover", func(t *testing.T) { faultcheck.Failover(t, l, 2, 2*time.Second) })

	t.Run("same users after a failover", func(t *testing.T) {
		if _, err := l.Failover(ctx, 3, 0); err != nil {
			t.Fatal(err)
		}
		addr := l.Nodes()[2].Addr
		if err := faultcheck.UserClient(t, addr, creds.Redlock, 2*time.Second).SetNX(ctx, "lock:promoted", "tok", 5*time.Second).Err(); err != nil {
			t.Errorf("redlock SET NX on the promoted replica: %v", err)
		}
		if err := faultcheck.UserClient(t, addr, creds.Monitor, 2*time.Second).Info(ctx, "replication").Err(); err != nil {
			t.Errorf("monitor INFO on the promoted replica: %v", err)
		}
		if err := faultcheck.UserClient(t, addr, creds.Redlock, 2*time.Second).Set(ctx, "foo", "bar", 0).Err(); !redis.IsPermissionError(err) {
			t.Errorf("redlock SET foo on the promoted replica: got %v, want NOPERM", err)
		}
		if err := faultcheck.PingAddr(addr, User{}, time.Second); !redis.IsAuthError(err) {
			t.Errorf("anonymous PING on the promoted replica: got %v, want an auth error", err)
		}
	})

	if err := Down(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	checkNothingLeft(t, dir, base, n)
}

// checkRedirect: with no fault in force, the kernel maps every front's port
// to its redis-server's (internal/redirect); a partition takes node 1's
// mapping away until the heal.
func checkRedirect(t *testing.T, l *Lab, base int) {
	if err := redirect.Available(); err != nil {
		testenv.Missing(t, err.Error())
	}
	ctx := context.Background()
	want := func(when string, partitioned int) {
		t.Helper()
		els, err := redirect.Elements(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range l.Nodes() {
			front, redis := base+n.ID, base+redisPortOffset+n.ID
			got, ok := els[front]
			switch {
			case n.ID == partitioned && ok:
				t.Errorf("%s: node %d's front is mapped to %d, want it carrying its connections", when, n.ID, got)
			case n.ID != partitioned && got != redis:
				t.Errorf("%s: node %d's front port %d maps to %d (%v), want %d", when, n.ID, front, got, ok, redis)
			}
		}
	}
	want("healthy", 0)
	if err := l.Partition(ctx, 1); err != nil {
		t.Fatal(err)
	}
	want("node 1 partitioned", 1)
	if err := l.Heal(ctx, 1); err != nil {
		t.Fatal(err)
	}
	want("healed", 0)
}

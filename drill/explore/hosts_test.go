package explore

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/infra/hostfault"
	"github.com/redlocklab/redlocklab/infra/hosts"
	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/infra/lab/profile"
	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/infra/remote"
	"github.com/redlocklab/redlocklab/internal/redistest"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

// TestExploreOnSSHHosts searches on a lab of five machines reached over
// SSH, as `redlab explore --hosts "$REDLAB_HOSTS"` does: two schedules
// judged, then a search SIGKILLed in the middle of its first schedule,
// after which, once the dead-man switches have run out, nothing of its
// faults is left on any host and every node answers. About three minutes
// on two cores; `make drills-ssh` runs it with the drills over SSH.
func TestExploreOnSSHHosts(t *testing.T) {
	if os.Getenv("REDLAB_DRILLS_SSH") != "1" {
		t.Skip("make drills-ssh runs it (REDLAB_DRILLS_SSH=1): five machines and a search do not share two cores with the suite")
	}
	if err := node.CheckMachineHost(); err != nil {
		testenv.Missing(t, err.Error())
	}
	bin, tf := testenv.RequireLab(t, lab.FindTerraform)
	cfg := lab.Config{Profile: profile.Profile{Nodes: 5, RestartDelay: 3 * time.Second, Machines: true, SSH: true},
		StateDir: filepath.Join(t.TempDir(), "lab"), Redlab: bin, Terraform: tf, InfraDir: "../../infra"}
	cfg.BasePort = redistest.FreeStableBasePort(t, cfg.Nodes, lab.PortOffsets(0)...)
	t.Cleanup(func() {
		if err := lab.Down(context.Background(), cfg); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	ctx := context.Background()
	l, err := lab.Up(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "REDLAB_STATE_DIR="+l.StateDir(), lab.CredentialsEnv+"="+l.CredentialsPath())
	explore := func(out string, extra ...string) *exec.Cmd {
		cmd := exec.Command(bin, append([]string{"explore", "--hosts", l.HostsFile(), "--seed", "11", "--no-shrink", "-v",
			"--faults", "crash,partition,pause", "--guards", "redlock,redlock-fenced,db-atomic", "--out", out, "--found", filepath.Join(out, "found")}, extra...)...)
		cmd.Env = env
		return cmd
	}

	// Two schedules, judged over SSH.
	out := filepath.Join(t.TempDir(), "explore")
	if b, err := explore(out, "--schedules", "2").CombinedOutput(); err != nil {
		t.Fatalf("explore --hosts: %v\n%s", err, b)
	}
	res, err := ReadResult(filepath.Join(out, ResultFile))
	if err != nil {
		t.Fatal(err)
	}
	if res.Ran != 2 || res.Judged < 1 {
		t.Errorf("explore --hosts: %d ran, %d judged; want 2 run, at least one judged", res.Ran, res.Judged)
	}

	// A search killed while its first schedule's faults are in force.
	killed := explore(filepath.Join(t.TempDir(), "killed"), "--schedules", "5", "--dead-man", "20s")
	stderr, err := killed.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := killed.Start(); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		once := false
		for sc.Scan() {
			if !once && strings.Contains(sc.Text(), "load started") {
				once = true
				close(started)
			}
		}
	}()
	select {
	case <-started:
	case <-time.After(2 * time.Minute):
		killed.Process.Kill()
		t.Fatal("the search never started its load")
	}
	// Kill it just after its first schedule's first fault started (the
	// seed draws it: the same schedule the search runs).
	c := DefaultConfig()
	c.Seed, c.Families = 11, []string{"crash", "partition", "pause"}
	first := c.Draw(0).Faults[0]
	t.Logf("the search is killed %v into its first schedule, after %s", first.At+time.Second, first)
	time.Sleep(first.At + time.Second)
	if err := killed.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed.Wait()
	// Its dead-man switch: --dead-man for a fault without a length, else
	// the length and hostfault's margin; then a few seconds more.
	deadMan := 20 * time.Second
	if d := first.For(); d > 0 {
		deadMan = d + hostfault.DefaultMargin
	}
	time.Sleep(deadMan + 5*time.Second)

	inv, err := hosts.Load(l.HostsFile())
	if err != nil {
		t.Fatal(err)
	}
	creds, err := l.Credentials()
	if err != nil {
		t.Fatal(err)
	}
	s, err := hostfault.Dial(ctx, inv, nil, hostfault.SessionOptions{Remote: remote.Config{KnownHosts: inv.KnownHosts},
		FaultLog: filepath.Join(t.TempDir(), "faults.jsonl"), Username: creds.Redlock.Name, Password: creds.Redlock.Password})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := s.WaitAnswering(wctx); err != nil {
		t.Errorf("after the killed search: %v", err)
	}
	left, err := s.HealAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for n, out := range left {
		if strings.TrimSpace(out) != "" {
			t.Errorf("host %d: the killed search left something its dead-man switch did not heal:\n%s", n, out)
		}
	}
}

package redlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlocklab/redlocklab/internal/redistest"
	"github.com/redlocklab/redlocklab/redlock"
)

func finding(rep redlock.Report, node int, check string) (redlock.Finding, bool) {
	for _, f := range rep.Findings {
		if f.Node == node && f.Check == check {
			return f, true
		}
	}
	return redlock.Finding{}, false
}

func wantFinding(t *testing.T, rep redlock.Report, node int, check string, sev redlock.Severity) {
	t.Helper()
	f, ok := finding(rep, node, check)
	if !ok {
		t.Errorf("node %d: no %q finding in %+v", node, check, rep.Findings)
		return
	}
	if f.Severity != sev {
		t.Errorf("node %d %s: got %v (%s), want %v", node, check, f.Severity, f.Message, sev)
	}
	if sev != redlock.Info && f.Fix == "" {
		t.Errorf("node %d %s: got an empty Fix, want one line", node, check)
	}
}

func check(t *testing.T, c *redlock.Client, opts ...redlock.CheckOption) redlock.Report {
	t.Helper()
	rep, err := c.Check(testCtx(t), opts...)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	return rep
}

func TestCheckWellConfigured(t *testing.T) {
	cl := redistest.Start(t, 3, redistest.Options{})
	rep := check(t, newClient(t, cl.Addrs(), testTimeout), redlock.WithTTL(10*time.Second))
	if rep.Critical() {
		t.Errorf("got a critical finding on a well-configured cluster: %+v", rep.Findings)
	}
	for _, f := range rep.Findings {
		if f.Severity != redlock.Info {
			t.Errorf("got %v finding %s on node %d: %s", f.Severity, f.Check, f.Node, f.Message)
		}
	}
	for i, n := range rep.Nodes {
		if !n.Reachable || n.Role != "master" || n.AppendFsync != "always" || n.RunID == "" {
			t.Errorf("node %d: got %+v, want a reachable master with appendfsync always", i, n)
		}
	}
}

func TestCheckFindsBadPractice(t *testing.T) {
	bad := redistest.Start(t, 1, redistest.Options{AppendFsync: "everysec", Extra: []string{"maxmemory-policy allkeys-lru"}})
	noAOF := redistest.Start(t, 1, redistest.Options{Extra: []string{"appendonly no"}})
	good := redistest.Start(t, 1, redistest.Options{})
	dead := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
	addrs := []string{bad.Nodes[0].Addr, noAOF.Nodes[0].Addr, good.Nodes[0].Addr, good.Nodes[0].Addr, dead}
	rep := check(t, newClient(t, addrs, testTimeout))

	if !rep.Critical() {
		t.Errorf("got no critical finding, want some")
	}
	for _, tc := range []struct {
		node  int
		check string
		sev   redlock.Severity
	}{
		{0, "appendfsync", redlock.Warning},
		{0, "maxmemory-policy", redlock.Critical},
		{1, "appendonly", redlock.Warning},
		{1, "maxmemory-policy", redlock.Info},
		{2, "appendfsync", redlock.Info},
		{2, "run_id", redlock.Info},
		{3, "run_id", redlock.Critical},
		{4, "reachable", redlock.Critical},
	} {
		wantFinding(t, rep, tc.node, tc.check, tc.sev)
	}
	if rep.Nodes[4].Reachable || rep.Nodes[4].Err == nil {
		t.Errorf("dead node: got %+v, want unreachable with an error", rep.Nodes[4])
	}
}

func TestCheckNodeCountAndTimeouts(t *testing.T) {
	cl := redistest.Start(t, 4, redistest.Options{})
	for _, tc := range []struct {
		name    string
		nodes   int
		timeout time.Duration
		ttl     time.Duration
		check   string
		sev     redlock.Severity
	}{
		{"odd", 3, testTimeout, 10 * time.Second, "nodes", redlock.Info},
		{"even", 4, testTimeout, 10 * time.Second, "nodes", redlock.Warning},
		{"too few", 1, testTimeout, 10 * time.Second, "nodes", redlock.Warning},
		{"small timeout", 3, testTimeout, 10 * time.Second, "timeouts", redlock.Info},
		{"timeout large against ttl", 3, 2 * time.Second, 5 * time.Second, "timeouts", redlock.Warning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, cl.Addrs()[:tc.nodes], testTimeout, redlock.WithRequestTimeout(tc.timeout))
			wantFinding(t, check(t, c, redlock.WithTTL(tc.ttl)), -1, tc.check, tc.sev)
		})
	}
}

func TestCheckClientSettings(t *testing.T) {
	cl := redistest.Start(t, 1, redistest.Options{})
	// A stock go-redis client: 3 command retries, 5s socket timeouts.
	plain := redis.NewClient(&redis.Options{Addr: cl.Nodes[0].Addr})
	t.Cleanup(func() { plain.Close() })
	c, err := redlock.New([]*redis.Client{plain})
	if err != nil {
		t.Fatal(err)
	}
	wantFinding(t, check(t, c), 0, "client", redlock.Warning)
}

func TestCheckConfigDenied(t *testing.T) {
	cl := redistest.Start(t, 1, redistest.Options{})
	ctx := context.Background()
	err := cl.Nodes[0].Client().Do(ctx, "ACL", "SETUSER", "monitor", "on", ">secret", "~*", "+@all", "-config", "-ping").Err()
	if err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	nodes := redlock.NewNodes(cl.Addrs(), redlock.WithNodeTimeout(testTimeout), redlock.WithAuth("monitor", "secret"))
	t.Cleanup(func() { nodes[0].Close() })
	c, err := redlock.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	rep := check(t, c)
	wantFinding(t, rep, 0, "config", redlock.Warning)
	wantFinding(t, rep, 0, "role", redlock.Info) // reachable although PING is denied too
}

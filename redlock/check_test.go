package redlock_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"
	"github.com/redlocklab/redlocklab/redlock"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
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
	cl := redlocktest.Start(t, 3, redlocktest.Options{})
	rep := check(t, redlocktest.NewClient(t, cl.Addrs(), calmTimeout), redlock.WithTTL(time.Minute))
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
	bad := redlocktest.Start(t, 1, redlocktest.Options{AppendFsync: "everysec", Extra: []string{"maxmemory-policy allkeys-lru"}})
	noAOF := redlocktest.Start(t, 1, redlocktest.Options{Extra: []string{"appendonly no"}})
	good := redlocktest.Start(t, 1, redlocktest.Options{})
	dead := fmt.Sprintf("127.0.0.1:%d", redlocktest.FreePort(t))
	addrs := []string{bad.Nodes[0].Addr, noAOF.Nodes[0].Addr, good.Nodes[0].Addr, good.Nodes[0].Addr, dead}
	rep := check(t, redlocktest.NewClient(t, addrs, calmTimeout))

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

// TestCheckReplication: a master with a replica and the replica itself are
// both critical, each saying why a replica is not an independent node.
func TestCheckReplication(t *testing.T) {
	master := redlocktest.Start(t, 1, redlocktest.Options{})
	replica := redlocktest.Start(t, 1, redlocktest.Options{Extra: []string{
		fmt.Sprintf("replicaof 127.0.0.1 %d", master.Nodes[0].Port),
	}})
	// The replica reports itself at once; the master counts it once the
	// link is up.
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := master.Nodes[0].Client().Info(testCtx(t), "replication").Result()
		if err == nil && strings.Contains(s, "connected_slaves:1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica never connected: %v %s", err, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
	rep := check(t, redlocktest.NewClient(t, []string{master.Nodes[0].Addr, replica.Nodes[0].Addr}, calmTimeout))
	if !rep.Critical() {
		t.Fatal("got no critical finding for a master and its replica")
	}
	wantFinding(t, rep, 0, "role", redlock.Info)
	wantFinding(t, rep, 0, "replicas", redlock.Critical)
	wantFinding(t, rep, 1, "role", redlock.Critical)
	for _, w := range []struct {
		node         int
		check        string
		msg, fixWord string
	}{
		{0, "replicas", "1 connected replica", "not an independent node"},
		{1, "role", fmt.Sprintf("replica of 127.0.0.1:%d", master.Nodes[0].Port), "independent masters"},
	} {
		f, _ := finding(rep, w.node, w.check)
		if !strings.Contains(f.Message, w.msg) || !strings.Contains(f.Message+f.Fix, w.fixWord) {
			t.Errorf("node %d %s: got %q / %q, want it to name %q and say %q", w.node, w.check, f.Message, f.Fix, w.msg, w.fixWord)
		}
	}
	if rep.Nodes[0].Replicas != 1 || rep.Nodes[1].Role != "slave" {
		t.Errorf("nodes: got %+v, want a master with 1 replica and a slave", rep.Nodes)
	}
}

func TestCheckNodeCountAndTimeouts(t *testing.T) {
	cl := redlocktest.Start(t, 4, redlocktest.Options{})
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
			c := redlocktest.NewClient(t, cl.Addrs()[:tc.nodes], testTimeout, redlock.WithRequestTimeout(tc.timeout))
			wantFinding(t, check(t, c, redlock.WithTTL(tc.ttl)), -1, tc.check, tc.sev)
		})
	}
}

func TestCheckClientSettings(t *testing.T) {
	cl := redlocktest.Start(t, 1, redlocktest.Options{})
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
	cl := redlocktest.Start(t, 1, redlocktest.Options{})
	ctx := context.Background()
	err := cl.Nodes[0].Client().Do(ctx, "ACL", "SETUSER", "monitor", "on", ">secret", "~*", "+@all", "-config", "-ping").Err()
	if err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	nodes := redlock.NewNodes(cl.Addrs(), redlock.WithNodeTimeout(calmTimeout), redlock.WithAuth("monitor", "secret"))
	t.Cleanup(func() { nodes[0].Close() })
	c, err := redlock.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	rep := check(t, c)
	for _, name := range []string{"appendonly", "appendfsync", "maxmemory-policy"} {
		wantFinding(t, rep, 0, name, redlock.Unchecked)
	}
	wantFinding(t, rep, 0, "role", redlock.Info) // reachable although PING is denied too
	if rep.Complete() {
		t.Error("Complete() = true for a report with unchecked findings")
	}
}

// TestCheckLoginRefused checks that a node that wants a login the audit
// did not give is reachable but has every setting Unchecked, and that the
// report says so.
func TestCheckLoginRefused(t *testing.T) {
	cl := redlocktest.Start(t, 1, redlocktest.Options{Extra: []string{"user default off resetpass resetkeys resetchannels -@all"}})
	nodes := redlock.NewNodes(cl.Addrs(), redlock.WithNodeTimeout(calmTimeout))
	t.Cleanup(func() { nodes[0].Close() })
	c, err := redlock.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	rep := check(t, c)
	if n := rep.Nodes[0]; !n.Reachable || !n.LoginFailed || n.Err == nil {
		t.Errorf("node: reachable %v, login failed %v, err %v; want reachable, login failed, with the error", n.Reachable, n.LoginFailed, n.Err)
	}
	wantFinding(t, rep, 0, "login", redlock.Unchecked)
	for _, name := range []string{"role", "replicas", "run_id", "appendonly", "appendfsync", "maxmemory-policy", "clock"} {
		wantFinding(t, rep, 0, name, redlock.Unchecked)
	}
	wantFinding(t, rep, 0, "client", redlock.Info)
	sum := rep.Summary()
	if sum.LoginFailed != 1 || sum.Unchecked != 8 || sum.Warning != 2 {
		t.Errorf("summary %+v: want 1 login failed, 8 unchecked and the 2 warnings of one node", sum)
	}
	if got, want := sum.String(), "1 node (1 refused the login); 12 findings: 0 critical, 2 warnings, 8 unchecked, 2 ok"; got != want {
		t.Errorf("summary line %q, want %q", got, want)
	}
	for _, f := range rep.Findings {
		if strings.Contains(f.Fix, "+info") || strings.Contains(f.Fix, "+config") {
			t.Errorf("finding %s's fix %q asks for a permission, but there was no login", f.Check, f.Fix)
		}
	}
}

// deadAddrs returns n distinct loopback addresses nothing listens on (a
// moment ago): the listeners are all open at once, so no port repeats.
func deadAddrs(t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		addrs = append(addrs, l.Addr().String())
	}
	return addrs
}

// TestCheckFixTexts: every fix is one sentence with the numbers of this node
// set filled in.
func TestCheckFixTexts(t *testing.T) {
	bad := redlocktest.Start(t, 1, redlocktest.Options{AppendFsync: "everysec", Extra: []string{"maxmemory-policy allkeys-lru"}})
	good := redlocktest.Start(t, 2, redlocktest.Options{})
	dead := deadAddrs(t, 2)
	// Six addresses (an even count), one server listed twice, two dead.
	addrs := []string{bad.Nodes[0].Addr, good.Nodes[0].Addr, good.Nodes[1].Addr, good.Nodes[1].Addr, dead[0], dead[1]}
	rep := check(t, redlocktest.NewClient(t, addrs, calmTimeout), redlock.WithTTL(30*time.Second))

	for _, f := range rep.Findings {
		if f.Severity == redlock.Info {
			if f.Fix != "" {
				t.Errorf("%s on node %d: got fix %q for a passed check, want none", f.Check, f.Node, f.Fix)
			}
			continue
		}
		if f.Fix == "" || !unicode.IsUpper([]rune(f.Fix)[0]) || !strings.HasSuffix(f.Fix, ".") || strings.Contains(f.Fix, "N-") {
			t.Errorf("%s on node %d: got fix %q, want one sentence with its numbers", f.Check, f.Node, f.Fix)
		}
	}
	for _, tc := range []struct {
		node  int
		check string
		fix   string
	}{
		{-1, "nodes", "Use 5 or 7 nodes: 6 nodes need 4 for a quorum and tolerate 2 down, no more than 5 nodes do."},
		{4, "reachable", "Start the node or fix its address: 4 of 6 nodes answer, exactly the quorum, so one more failure stops every acquire."},
		{3, "run_id", "List every server once: nodes 3 and 4 are the same server, so the 6 addresses give fewer than 6 independent masters."},
		{0, "appendfsync", "Set appendfsync always, or delay every restart of this node by the max lock TTL (30s here)."},
	} {
		f, ok := finding(rep, tc.node, tc.check)
		if !ok || f.Fix != tc.fix {
			t.Errorf("node %d %s: got fix %q, want %q", tc.node, tc.check, f.Fix, tc.fix)
		}
	}
	if f, _ := finding(rep, 3, "run_id"); !strings.Contains(f.Message, "node 3 ("+good.Nodes[1].Addr+")") {
		t.Errorf("duplicate run_id: got message %q, want it to name node 3 (numbered from 1) and its address", f.Message)
	}
	if got, want := rep.Summary(), (redlock.Summary{Nodes: 6, Unreachable: 2}); got.Nodes != want.Nodes || got.Unreachable != want.Unreachable {
		t.Errorf("summary: got %+v, want 6 nodes, 2 unreachable", got)
	}
}

func TestReportSummary(t *testing.T) {
	up, down := redlock.NodeInfo{Reachable: true}, redlock.NodeInfo{}
	f := func(sev redlock.Severity) redlock.Finding { return redlock.Finding{Severity: sev} }
	for _, tc := range []struct {
		rep  redlock.Report
		want redlock.Summary
		line string
	}{
		{redlock.Report{}, redlock.Summary{}, "0 nodes; 0 findings: 0 critical, 0 warnings, 0 ok"},
		{redlock.Report{Nodes: []redlock.NodeInfo{up}, Findings: []redlock.Finding{f(redlock.Info)}},
			redlock.Summary{Nodes: 1, OK: 1}, "1 node; 1 finding: 0 critical, 0 warnings, 1 ok"},
		{redlock.Report{Nodes: []redlock.NodeInfo{up, down, down},
			Findings: []redlock.Finding{f(redlock.Critical), f(redlock.Critical), f(redlock.Warning), f(redlock.Info), f(redlock.Info)}},
			redlock.Summary{Nodes: 3, Unreachable: 2, Critical: 2, Warning: 1, OK: 2},
			"3 nodes (2 unreachable); 5 findings: 2 critical, 1 warning, 2 ok"},
	} {
		got := tc.rep.Summary()
		if got != tc.want || got.String() != tc.line {
			t.Errorf("got %+v %q, want %+v %q", got, got.String(), tc.want, tc.line)
		}
	}
}

func TestReportJSON(t *testing.T) {
	rep := redlock.Report{
		Nodes: []redlock.NodeInfo{{Node: 0, Addr: "127.0.0.1:1", Err: errors.New("dial tcp: connection refused"), RTT: 1500}},
		Findings: []redlock.Finding{
			{Node: 0, Check: "reachable", Severity: redlock.Critical, Message: "no answer", Fix: "Start the node."},
			{Node: -1, Check: "nodes", Severity: redlock.Warning, Message: "1 node"},
		},
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"addr":"127.0.0.1:1"`, `"reachable":false`, `"error":"dial tcp: connection refused"`, `"rtt_ns":1500`,
		`"severity":"critical"`, `"severity":"warning"`, `"node":-1`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("got %s, want %s in it", b, want)
		}
	}
	var back struct{ Findings []redlock.Finding }
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Findings, rep.Findings) {
		t.Errorf("findings after a round trip: got %+v, want %+v", back.Findings, rep.Findings)
	}
	var s redlock.Severity
	if err := s.UnmarshalText([]byte("fatal")); err == nil {
		t.Error(`UnmarshalText("fatal"): got no error, want one`)
	}
}

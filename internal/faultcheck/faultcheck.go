// Package faultcheck holds the fault checks that run against any lab's
// nodes: a provisioned lab (infra/lab) or a node supervisor a test runs in
// its own process (infra/node). Each fault is injected through the Lab
// interface and its effect checked from the outside, as a client sees it.
package faultcheck

import (
	"context"
	"errors"
	"fmt"
	"github.com/redlocklab/redlocklab/infra/fault"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlocklab/redlocklab/infra/node"
)

// Lab is what the checks drive: *lab.Lab, or a test's client of one
// in-process supervisor.
type Lab interface {
	StateDir() string
	Credentials() (node.Credentials, error)
	NodeStatus(ctx context.Context, id int) (node.Status, error)
	Faults() ([]node.Fault, error)
	Kill(ctx context.Context, id int) (node.FaultResult, error)
	PowerLoss(ctx context.Context, id int) (node.FaultResult, error)
	Restart(ctx context.Context, id int, delay time.Duration) (node.FaultResult, error)
	Stop(ctx context.Context, id int) (node.FaultResult, error)
	Start(ctx context.Context, id int) (node.FaultResult, error)
	Pause(ctx context.Context, id int, d time.Duration) (node.FaultResult, error)
	Partition(ctx context.Context, ids ...int) error
	Heal(ctx context.Context, ids ...int) error
	Latency(ctx context.Context, id int, add, jitter time.Duration) (node.FaultResult, error)
	ClockJump(ctx context.Context, id int, by time.Duration) (node.FaultResult, error)
	ClockRate(ctx context.Context, id int, factor float64, d time.Duration) (node.FaultResult, error)
	Failover(ctx context.Context, id int, lag time.Duration) (node.FaultResult, error)
}

// addr is node id's front, the address its clients use.
func addr(t *testing.T, l Lab, id int) string {
	t.Helper()
	return Status(t, l, id).Addr()
}

// infoValue returns the value of "key:value" in an INFO reply.
func infoValue(info, key string) string {
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimRight(line, "\r\n"), ":"); ok && k == key {
			return v
		}
	}
	return ""
}

// LabUser is the user tests log in as: the lab's admin when it has
// credentials (ACLs on), nobody for an in-process node without ACL.
func LabUser(t *testing.T, l Lab) node.User {
	t.Helper()
	c, err := l.Credentials()
	if errors.Is(err, node.ErrNoCredentials) {
		return node.User{}
	}
	if err != nil {
		t.Fatal(err)
	}
	return c.Admin
}

// Client returns a go-redis client for node id's proxy, logged in as
// LabUser, with short timeouts and no retries.
func Client(t *testing.T, l Lab, id int, timeout time.Duration) *redis.Client {
	t.Helper()
	return UserClient(t, addr(t, l, id), LabUser(t, l), timeout)
}

// UserClient returns a go-redis client for addr logged in as u.
func UserClient(t *testing.T, addr string, u node.User, timeout time.Duration) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr: addr, DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
		MaxRetries: -1, PoolSize: 1, Username: u.Name, Password: u.Password,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// Ping PINGs node id through its proxy as labUser.
func Ping(t *testing.T, l Lab, id int, timeout time.Duration) error {
	t.Helper()
	return PingAddr(addr(t, l, id), LabUser(t, l), timeout)
}

// PingAddr PINGs addr logged in as u.
func PingAddr(addr string, u node.User, timeout time.Duration) error {
	c := redis.NewClient(&redis.Options{
		Addr: addr, DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, MaxRetries: -1, PoolSize: 1,
		Username: u.Name, Password: u.Password,
	})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

// Eventually polls f until it returns nil or limit passes.
func Eventually(t *testing.T, limit time.Duration, what string, f func() error) {
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

// IsTimeout reports whether err is a client's timeout.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Status is node id's status from its supervisor.
func Status(t *testing.T, l Lab, id int) node.Status {
	t.Helper()
	st, err := l.NodeStatus(context.Background(), id)
	if err != nil {
		t.Fatalf("status of node %d: %v", id, err)
	}
	return st
}

// The fault checks below run against any lab, in-process or provisioned.

// Partition partitions the node: its clients time out (not refused) until
// the heal, after which it answers again.
func Partition(t *testing.T, l Lab, id int) {
	t.Helper()
	ctx := context.Background()
	if err := l.Partition(ctx, id); err != nil {
		t.Fatal(err)
	}
	if st := Status(t, l, id); !st.Partitioned {
		t.Errorf("partition: status %+v, want partitioned", st)
	}
	err := Ping(t, l, id, 300*time.Millisecond)
	if err == nil || !IsTimeout(err) || errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("partitioned node %d: got %v, want a client timeout (not refused)", id, err)
	}
	if err := l.Heal(ctx, id); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 5*time.Second, "healed node answers", func() error { return Ping(t, l, id, 300*time.Millisecond) })
}

// Latency adds add to every reply of the node (a lower bound on a PING)
// and removes it again.
func Latency(t *testing.T, l Lab, id int, add time.Duration) {
	t.Helper()
	ctx := context.Background()
	c := Client(t, l, id, 5*time.Second)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Latency(ctx, id, add, 0); err != nil {
		t.Fatal(err)
	}
	// A front whose connections the kernel redirected while no fault was
	// in force (internal/redirect) resets them when the fault starts: the
	// client's one connection fails its next request, and reconnects
	// through the front.
	if err := c.Ping(ctx).Err(); err != nil {
		if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("latency: first PING: %v, want an answer, or a reset of a redirected connection", err)
		}
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
	if st := Status(t, l, id); st.Latency != 0 || st.Active[fault.Latency] != "" {
		t.Errorf("latency removed: status %+v, want no latency", st)
	}
}

// Pause pauses the node for d: it is paused and silent, then up again.
func Pause(t *testing.T, l Lab, id int, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	if _, err := l.Pause(ctx, id, d); err != nil {
		t.Fatal(err)
	}
	if st := Status(t, l, id); st.State != node.Paused {
		t.Errorf("paused: state %s, want paused", st.State)
	}
	if err := Ping(t, l, id, 100*time.Millisecond); !IsTimeout(err) {
		t.Errorf("paused node %d: got %v, want a timeout", id, err)
	}
	Eventually(t, d+10*time.Second, "paused node resumes", func() error { return Ping(t, l, id, 300*time.Millisecond) })
	Eventually(t, 5*time.Second, "state up after pause", func() error {
		if st := Status(t, l, id); st.State != node.Up {
			return fmt.Errorf("state %s", st.State)
		}
		return nil
	})
}

// Kill kills the node and asserts the order of events: down right after
// the kill, in the restart delay, up only once the delay has passed.
//
// The key written just before the kill survives it exactly when the
// profile persists at all: kill -9 keeps page-cache writes.
func Kill(t *testing.T, l Lab, id int, delay time.Duration, persists bool) {
	t.Helper()
	ctx := context.Background()
	c := Client(t, l, id, 2*time.Second)
	if err := c.Set(ctx, "lock:killed", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if persists {
		AwaitAOFWritten(t, c)
	}
	before := Status(t, l, id)
	killed := time.Now()
	res, err := l.Kill(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st := res.Status.State; st != node.Waiting && st != node.Starting {
		t.Errorf("right after kill: state %s, want waiting (the restart delay)", st)
	}
	// Only a node that answers before the delay has passed is wrong; a slow
	// machine may reach this line late, so check the order, not the clock.
	if err := Ping(t, l, id, 200*time.Millisecond); err == nil && time.Since(killed) < delay {
		t.Errorf("node %d answered %v after kill, want down for the restart delay %v", id, time.Since(killed), delay)
	}
	awaitBack(t, l, id, delay+20*time.Second, "killed node comes back")
	if back := time.Since(killed); back < delay {
		t.Errorf("node %d back %v after kill, want not before the restart delay %v", id, back, delay)
	}
	n, err := Client(t, l, id, 2*time.Second).Exists(ctx, "lock:killed").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got := n == 1; got != persists {
		t.Errorf("key written before kill -9: exists %v after the restart, want %v", got, persists)
	}
	after := Status(t, l, id)
	if after.Restarts != before.Restarts+1 || after.RedisPID == before.RedisPID {
		t.Errorf("after kill: restarts %d pid %d, want restarts %d and a new pid (was %d)",
			after.Restarts, after.RedisPID, before.Restarts+1, before.RedisPID)
	}
}

// awaitBack waits until node id answers and its supervisor knows it:
// on a machine, systemd starts redis-server again before the supervisor
// finds its pid.
func awaitBack(t *testing.T, l Lab, id int, limit time.Duration, what string) {
	t.Helper()
	Eventually(t, limit, what, func() error {
		if err := Ping(t, l, id, 300*time.Millisecond); err != nil {
			return err
		}
		if st := Status(t, l, id); st.State != node.Up || st.RedisPID == 0 {
			return fmt.Errorf("answers, but its supervisor reports %s, redis pid %d", st.State, st.RedisPID)
		}
		return nil
	})
}

// RestartOverride restarts the node with a delay of 0: the fault records
// it, and a new redis-server answers.
func RestartOverride(t *testing.T, l Lab, id int) {
	t.Helper()
	ctx := context.Background()
	before := Status(t, l, id)
	res, err := l.Restart(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.ID == "" || res.Params["delay"] != "0s" {
		t.Errorf("restart fault: got %+v, want delay 0s recorded", res.Result)
	}
	awaitBack(t, l, id, 20*time.Second, "restarted node comes back")
	if after := Status(t, l, id); after.RedisPID == before.RedisPID {
		t.Errorf("restart: redis pid still %d, want a new process", after.RedisPID)
	}
}

// StopStart stops the node cleanly and starts it again; a key written
// before survives when the profile persists.
func StopStart(t *testing.T, l Lab, id int, persists bool) {
	t.Helper()
	ctx := context.Background()
	c := Client(t, l, id, 2*time.Second)
	if err := c.Set(ctx, "lab:stopstart", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := l.Stop(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status.State != node.Stopped || res.Status.RedisPID != 0 {
		t.Errorf("stop: status %+v, want stopped, no redis pid", res.Status)
	}
	if err := Ping(t, l, id, 200*time.Millisecond); err == nil {
		t.Errorf("stopped node %d answered", id)
	}
	res, err = l.Start(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status.State != node.Up {
		t.Errorf("start: state %s, want up", res.Status.State)
	}
	n, err := Client(t, l, id, 2*time.Second).Exists(ctx, "lab:stopstart").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := n == 1, persists; got != want {
		t.Errorf("key after a clean stop/start: exists %v, want %v", got, want)
	}
}

// ClockJump jumps the node's clock 5s ahead: a key with 3s left expires,
// one with 60s keeps 55s at most, one without expiry is untouched.
func ClockJump(t *testing.T, l Lab, id int) {
	t.Helper()
	ctx := context.Background()
	c := Client(t, l, id, 2*time.Second)
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

// ClockRate runs the node's clock at 3x for 1s: a key loses at least 2s
// more than real time.
func ClockRate(t *testing.T, l Lab, id int) {
	t.Helper()
	ctx := context.Background()
	c := Client(t, l, id, 2*time.Second)
	if err := c.Set(ctx, "lab:rate", "1", 60*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := l.ClockRate(ctx, id, 3, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	Eventually(t, 10*time.Second, "clock-rate fault ends", func() error {
		fs, err := l.Faults()
		if err != nil {
			return err
		}
		for _, f := range fs {
			if f.ID == res.ID && !f.Active() {
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

// FaultEnded waits until fault id has ended in faults.jsonl, after it
// started, with params.
func FaultEnded(t *testing.T, l Lab, id string, params map[string]string) {
	t.Helper()
	Eventually(t, 10*time.Second, "fault "+id+" ends", func() error {
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

// RunID is a redis-server's run_id, read through c.
func RunID(t *testing.T, c *redis.Client) string {
	t.Helper()
	info, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	return infoValue(info, "run_id")
}

// Role is the replication role of the server c talks to.
func Role(c *redis.Client) (string, error) {
	info, err := c.Info(context.Background(), "replication").Result()
	if err != nil {
		return "", err
	}
	return infoValue(info, "role"), nil
}

// AwaitKeys waits until every key is on the server c talks to.
func AwaitKeys(t *testing.T, c *redis.Client, what string, keys []string) {
	t.Helper()
	Eventually(t, 10*time.Second, what, func() error {
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

// Failover runs two failovers of node id of a replicated lab. The
// first, without lag: the replica is promoted behind the node's address
// (another run_id, role master, through the same front) with a key
// written well before; the crashed original comes back after its restart
// delay and follows it. The second, with lag, swaps the roles back: keys
// written before the lag survive, keys written during it are gone.
func Failover(t *testing.T, l Lab, id int, lag time.Duration) {
	t.Helper()
	ctx := context.Background()
	u := LabUser(t, l)
	st := Status(t, l, id)
	if st.Replica == nil || st.Replica.Promoted || !st.Replica.Synced {
		t.Fatalf("node %d before the failover: replica %+v, want a synced replica", id, st.Replica)
	}
	original := "127.0.0.1:" + strconv.Itoa(st.RedisPort)
	replicaAddr := st.Replica.Addr
	front := Client(t, l, id, 2*time.Second)
	before := RunID(t, front)
	if r, err := Role(front); err != nil || r != "master" {
		t.Fatalf("front before the failover: role %q, %v; want master", r, err)
	}

	// Without lag: written well before, so on the replica by then.
	old := []string{"lock:fo:old1", "lock:fo:old2"}
	for _, k := range old {
		if err := front.Set(ctx, k, "v", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	AwaitKeys(t, UserClient(t, replicaAddr, u, 2*time.Second), "the replica has the keys", old)
	res, err := l.Failover(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Failover == nil || res.Failover.Promoted != replicaAddr || res.ID == "" || res.Kind != fault.Failover {
		t.Fatalf("failover result: got %+v, want the replica %s promoted", res, replicaAddr)
	}
	// A new client: the front closed the connections to the dead master.
	front = Client(t, l, id, 2*time.Second)
	if r, err := Role(front); err != nil || r != "master" {
		t.Errorf("front after the failover: role %q, %v; want master", r, err)
	}
	if after := RunID(t, front); after == before || after != RunID(t, UserClient(t, replicaAddr, u, 2*time.Second)) {
		t.Errorf("front after the failover: run_id %s (was %s), want the replica's", after, before)
	}
	if n, err := front.Exists(ctx, old...).Result(); err != nil || int(n) != len(old) {
		t.Errorf("keys written well before a failover without lag: %d of %d there (%v), want all", n, len(old), err)
	}
	FaultEnded(t, l, res.ID, map[string]string{"promoted": replicaAddr, "lag": "0s"})
	if st := Status(t, l, id); st.Replica == nil || !st.Replica.Promoted {
		t.Errorf("status after the failover: replica %+v, want promoted", st.Replica)
	}
	// The crashed original comes back after its restart delay, as a
	// replica of the promoted one.
	Eventually(t, 30*time.Second, "the original follows the promoted replica", func() error {
		st := Status(t, l, id)
		if st.State != node.Up || st.Replica == nil || !st.Replica.Synced {
			return fmt.Errorf("state %s, replica %+v", st.State, st.Replica)
		}
		if r, err := Role(UserClient(t, original, u, 2*time.Second)); err != nil || r != "slave" {
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
	AwaitKeys(t, UserClient(t, original, u, 2*time.Second), "the original has the kept keys", kept)
	type outcome struct {
		res node.FaultResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := l.Failover(ctx, id, lag)
		done <- outcome{r, err}
	}()
	Eventually(t, 10*time.Second, "replication is held back", func() error {
		if st := Status(t, l, id); st.Replica == nil || !st.Replica.LinkCut {
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
	front = Client(t, l, id, 2*time.Second)
	if n, err := front.Exists(ctx, kept...).Result(); err != nil || int(n) != len(kept) {
		t.Errorf("keys written before the lag: %d of %d there (%v), want all", n, len(kept), err)
	}
	if n, err := front.Exists(ctx, lost...).Result(); err != nil || n != 0 {
		t.Errorf("keys written during the lag: %d of %d there (%v), want none", n, len(lost), err)
	}
	if r, err := Role(front); err != nil || r != "master" {
		t.Errorf("front after the second failover: role %q, %v; want master", r, err)
	}
	FaultEnded(t, l, o.res.ID, map[string]string{"promoted": original, "lag": lag.String(), "caught_up": "true"})
	Eventually(t, 30*time.Second, "the replica follows again", func() error {
		st := Status(t, l, id)
		if st.Replica == nil || st.Replica.Promoted || !st.Replica.Synced || st.Replica.State != node.Up {
			return fmt.Errorf("replica %+v", st.Replica)
		}
		return nil
	})
}

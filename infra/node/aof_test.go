package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlocklab/redlocklab/internal/redistest"
)

// resp renders commands as Redis writes them into an AOF.
func resp(cmds ...[]string) string {
	var b strings.Builder
	for _, c := range cmds {
		fmt.Fprintf(&b, "*%d\r\n", len(c))
		for _, a := range c {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	return b.String()
}

func TestAOFCommands(t *testing.T) {
	sel := resp([]string{"SELECT", "0"})
	set := resp([]string{"set", "a", "1"})
	multi := resp([]string{"MULTI"})
	inner := resp([]string{"set", "b", "2"}, []string{"PEXPIREAT", "b", "1796041823603"})
	exec := resp([]string{"EXEC"})
	file := sel + set + multi + inner + exec + set
	cmds, err := aofCommands(strings.NewReader(file + "*3\r\n$3\r\nset\r\n$1")) // a write in progress
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		end             int
		write, cuttable bool
	}
	e := 0
	at := func(s string) int { e += len(s); return e }
	wants := []want{
		{at(sel), false, true},
		{at(set), true, true},
		{at(multi), false, false},
		{at(resp([]string{"set", "b", "2"})), true, false},
		{at(resp([]string{"PEXPIREAT", "b", "1796041823603"})), true, false},
		{at(exec), false, true},
		{at(set), true, true},
	}
	if len(cmds) != len(wants) {
		t.Fatalf("got %d commands %+v, want %d (the partial one left out)", len(cmds), cmds, len(wants))
	}
	for i, w := range wants {
		if c := cmds[i]; c.end != int64(w.end) || c.write != w.write || c.cuttable != w.cuttable {
			t.Errorf("command %d: got %+v, want end %d write %v cuttable %v", i, c, w.end, w.write, w.cuttable)
		}
	}
	if _, err := aofCommands(strings.NewReader("REDIS0011\xfa\tredis-ver\n")); err == nil {
		t.Error("an RDB preamble: got no error, want one (only incr files are parsed)")
	}
}

func TestTruncateAOF(t *testing.T) {
	set := func(k string) string { return resp([]string{"set", k, "v"}) }
	txn := resp([]string{"MULTI"}, []string{"set", "t", "1"}, []string{"pexpire", "t", "9"}, []string{"EXEC"})
	head := resp([]string{"SELECT", "0"}) + set("a")
	file := head + txn + set("b") + set("c")
	tests := []struct {
		name                 string
		size                 int
		wantLen              int
		wantBytes, wantWrite int64
	}{
		{"at a boundary", len(head + txn + set("b")), len(head + txn + set("b")), int64(len(set("c"))), 1},
		{"mid-command: back to the command before", len(head+txn) + 3, len(head + txn), int64(len(set("b") + set("c"))), 2},
		{"inside a transaction: back before MULTI", len(head) + len(txn) - 5, len(head), int64(len(txn + set("b") + set("c"))), 4},
		{"to nothing", 0, 0, int64(len(file)), 5},
		{"already that short", len(file) + 10, len(file), 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "appendonly.aof.1.incr.aof")
			if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
				t.Fatal(err)
			}
			res, err := truncateAOF(path, int64(tt.size))
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Size() != int64(tt.wantLen) || res.bytes != tt.wantBytes || res.commands != tt.wantWrite || !res.exact {
				t.Errorf("got size %d, %+v; want size %d, %d bytes and %d writes cut, exact", fi.Size(), res, tt.wantLen, tt.wantBytes, tt.wantWrite)
			}
		})
	}
}

func TestReadAOFManifest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "appendonly.aof.manifest")
	m := "file appendonly.aof.2.base.rdb seq 2 type b\nfile appendonly.aof.1.base.rdb seq 1 type h\n" +
		"file appendonly.aof.2.incr.aof seq 2 type i\nfile appendonly.aof.3.incr.aof seq 3 type i\n"
	if err := os.WriteFile(path, []byte(m), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readAOFManifest(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.base != "appendonly.aof.2.base.rdb" || strings.Join(got.incr, ",") != "appendonly.aof.2.incr.aof,appendonly.aof.3.incr.aof" {
		t.Errorf("got %+v, want base seq 2 and incr files 2, 3 (history left out)", got)
	}
	if err := os.WriteFile(path, []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readAOFManifest(path); err == nil {
		t.Error("a line that is not a file entry: got no error, want one")
	}
}

func TestAOFSamplerKeepsWhatTheCutNeeds(t *testing.T) {
	a := &aofSampler{dir: t.TempDir(), manifest: "none"}
	t0 := time.Now()
	for i := range 100 { // 5 s of samples, 50 ms apart
		a.sample(t0.Add(time.Duration(i) * 50 * time.Millisecond))
	}
	last := t0.Add(99 * 50 * time.Millisecond)
	if got := a.samples[0].at; got.After(last.Add(-EverysecWindow - aofHistory)) {
		t.Errorf("oldest sample kept %v before the newest, want at least %v", last.Sub(got), EverysecWindow+aofHistory)
	}
	if n := len(a.samples); n > 50 {
		t.Errorf("kept %d samples, want the history trimmed to about 2 s (41)", n)
	}
	a.mu.Lock()
	s, ok := a.keptAtLocked(last.Add(-EverysecWindow))
	early, _ := a.keptAtLocked(t0.Add(-time.Hour))
	a.mu.Unlock()
	if !ok || !s.at.Equal(last.Add(-EverysecWindow)) {
		t.Errorf("sample for a crash now: got %v, want the one taken exactly 1 s before", s.at)
	}
	if !early.at.Equal(a.samples[0].at) {
		t.Errorf("sample for a time before any: got %v, want the oldest kept", early.at)
	}
}

// TestPowerLossCutRealRedis writes set A, samples the AOF, writes set B
// (with a script, which Redis logs as MULTI/EXEC), kills redis-server and
// cuts back to the sample: the restarted server, reading the cut AOF,
// has A and not B. The sample times are given, so nothing depends on the
// clock.
func TestPowerLossCutRealRedis(t *testing.T) {
	node := redistest.Start(t, 1, redistest.Options{AppendFsync: "everysec"}).Nodes[0]
	ctx := context.Background()
	c := node.Client()
	for i := range 10 {
		if err := c.Set(ctx, fmt.Sprintf("lock:a%d", i), "v", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Set A is on file, not in Redis's buffer (see awaitAOFWritten).
	awaitAOFWritten(t, c)
	a := newAOFSampler(redisConf{dir: node.Dir, appendDirName: "appendonlydir", appendFilename: "appendonly.aof"})
	t0 := time.Now()
	a.sample(t0)
	if s := a.latest(); s == nil || s.Bytes == 0 {
		t.Fatalf("sample after set A: %+v, want the incr file's size", s)
	}
	for i := range 5 {
		if err := c.Set(ctx, fmt.Sprintf("lock:b%d", i), "v", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	script := `redis.call("SET", KEYS[1], "v"); redis.call("PEXPIRE", KEYS[1], 60000); return 1`
	if err := c.Eval(ctx, script, []string{"lock:b-script"}).Err(); err != nil {
		t.Fatal(err)
	}
	awaitAOFWritten(t, c)
	a.sample(t0.Add(2 * time.Second)) // B is in this one: a cut at t0+1s must not use it
	node.Kill()
	cut, err := a.cutAt(t0.Add(time.Second+EverysecWindow/2), EverysecWindow)
	if err != nil {
		t.Fatal(err)
	}
	if !cut.Exact || cut.Commands != 7 || cut.Bytes == 0 || len(cut.Files) != 1 || !cut.KeptAt.Equal(t0) {
		t.Errorf("cut: got %+v, want the sample at t0, 7 writes (5 SET, SET+PEXPIRE of the script) in one file, exact", cut)
	}
	node.Restart()
	c = node.Client()
	for i := range 10 {
		if n, err := c.Exists(ctx, fmt.Sprintf("lock:a%d", i)).Result(); err != nil || n != 1 {
			t.Errorf("lock:a%d after the cut: exists %d, %v; want kept", i, n, err)
		}
	}
	for _, k := range []string{"lock:b0", "lock:b4", "lock:b-script"} {
		if n, err := c.Exists(ctx, k).Result(); err != nil || n != 0 {
			t.Errorf("%s after the cut: exists %d, %v; want lost", k, n, err)
		}
	}
}

// TestRedisLoadsAOFCutMidCommand documents what the lab relies on when a
// cut cannot be placed on a command boundary: with aof-load-truncated at
// its default (yes; the rendered redis.conf leaves it alone), Redis drops
// a partial last command of the last incr file and starts.
func TestRedisLoadsAOFCutMidCommand(t *testing.T) {
	node := redistest.Start(t, 1, redistest.Options{AppendFsync: "everysec"}).Nodes[0]
	ctx := context.Background()
	c := node.Client()
	if v, err := c.ConfigGet(ctx, "aof-load-truncated").Result(); err != nil || v["aof-load-truncated"] != "yes" {
		t.Fatalf("aof-load-truncated: got %v, %v; want the default yes", v, err)
	}
	if err := c.Set(ctx, "lock:a", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	awaitAOFWritten(t, c)
	conf := redisConf{dir: node.Dir, appendDirName: "appendonlydir", appendFilename: "appendonly.aof"}
	files, err := readAOFManifest(filepath.Join(conf.aofDir(), conf.aofManifest()))
	if err != nil || len(files.incr) != 1 {
		t.Fatalf("manifest: %+v, %v; want one incr file", files, err)
	}
	incr := filepath.Join(conf.aofDir(), files.incr[0])
	fi, err := os.Stat(incr)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "lock:b", strings.Repeat("x", 100), 0).Err(); err != nil {
		t.Fatal(err)
	}
	awaitAOFWritten(t, c)
	node.Kill()
	if err := os.Truncate(incr, fi.Size()+20); err != nil { // inside SET lock:b
		t.Fatal(err)
	}
	node.Restart()
	c = node.Client()
	if n, _ := c.Exists(ctx, "lock:a").Result(); n != 1 {
		t.Error("lock:a, written before the cut: gone, want kept")
	}
	if n, _ := c.Exists(ctx, "lock:b").Result(); n != 0 {
		t.Error("lock:b, cut mid-command: present, want dropped")
	}
}

// awaitAOFWritten waits until redis-server has written every write it
// acknowledged to its AOF (see faultcheck.AwaitAOFWritten, which this
// package's internal tests cannot import).
func awaitAOFWritten(t *testing.T, c *redis.Client) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := c.Info(context.Background(), "persistence").Result()
		if err == nil && strings.Contains(info, "aof_buffer_length:0\r\n") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("AOF buffer written: still failing after 10s: %v %s", err, info)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

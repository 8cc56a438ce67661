package node

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		end   int
		write bool
	}
	e := 0
	at := func(s string) int { e += len(s); return e }
	wants := []want{
		{at(sel), false},
		{at(set), true},
		{at(multi), false},
		{at(resp([]string{"set", "b", "2"})), true},
		{at(resp([]string{"PEXPIREAT", "b", "1796041823603"})), true},
		{at(exec), false},
		{at(set), true},
	}
	if len(cmds) != len(wants) {
		t.Fatalf("got %d commands %+v, want %d (the partial one left out)", len(cmds), cmds, len(wants))
	}
	for i, w := range wants {
		if c := cmds[i]; c.end != int64(w.end) || c.write != w.write {
			t.Errorf("command %d: got %+v, want end %d write %v", i, c, w.end, w.write)
		}
	}
	if _, err := aofCommands(strings.NewReader("REDIS0011\xfa\tredis-ver\n")); err == nil {
		t.Error("an RDB preamble: got no error, want one (only incr files are parsed)")
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

package spec

import (
	"bytes"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/redlocklab/redlocklab/inventory"
)

// forget clears what says where a spec was read (its file and the lines),
// which a written spec cannot keep.
func forget(s *Spec) *Spec {
	c := *s
	c.File = ""
	c.Faults = append([]Fault(nil), s.Faults...)
	for i := range c.Faults {
		c.Faults[i].Line = 0
	}
	c.Windows = append([]Window(nil), s.Windows...)
	for i := range c.Windows {
		c.Windows[i].Line = 0
	}
	c.Expect = map[inventory.Guard][]Expectation{}
	for g, xs := range s.Expect {
		ys := append([]Expectation(nil), xs...)
		for i := range ys {
			ys[i].Line = 0
		}
		c.Expect[g] = ys
	}
	return &c
}

// TestFormatRoundTrip writes every runbook's spec back out and reads it
// again: the same Spec, and the same bytes when written a second time.
func TestFormatRoundTrip(t *testing.T) {
	var files []string
	for _, dir := range []string{"drills", "machines", "controls", "found"} {
		fs, err := filepath.Glob("../../runbooks/" + dir + "/*.md")
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, fs...)
	}
	n := 0
	for _, f := range files {
		if filepath.Base(f) == "README.md" {
			continue
		}
		s, err := ReadFile(f)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		n++
		out := Format(s, "# "+s.Name+"\n\nwritten back\n")
		back, err := Parse(s.Name+".md", out)
		if err != nil {
			t.Errorf("%s: written spec does not parse: %v\n%s", f, err, out)
			continue
		}
		if !reflect.DeepEqual(forget(back), forget(s)) {
			t.Errorf("%s: written and read back, the spec differs:\n got %+v\nwant %+v\n%s", f, forget(back), forget(s), out)
		}
		if again := Format(back, "# "+s.Name+"\n\nwritten back\n"); !bytes.Equal(again, out) {
			t.Errorf("%s: written twice, the bytes differ:\n%s\n---\n%s", f, out, again)
		}
	}
	if n < 24 {
		t.Errorf("round-tripped %d runbooks, want every one (at least 24)", n)
	}
}

// TestFormatQuotes: a title and expectations with YAML's special
// characters come back as they were.
func TestFormatQuotes(t *testing.T) {
	s, err := Parse("q.md", []byte(`---
drill: q
title: 'a title: with "quotes", # and a colon'
workload: {guards: [redlock], rate: 5, duration: 10s}
faults:
  - {at: 2s, fault: latency, nodes: [1, 2], add: 20ms, jitter: 5ms, for: 3s}
  - {at: 4s, fault: clock-jump, nodes: [3], by: -2s}
expect:
  redlock: ["safety.lock_violations==0", "during.acquire.p99<=2*before.acquire.p99"]
---
`))
	if err != nil {
		t.Fatal(err)
	}
	out := string(s.FrontMatter())
	for _, want := range []string{`title: "a title: with \"quotes\", # and a colon"`, "by: -2s", "add: 20ms, jitter: 5ms, for: 3s"} {
		if !strings.Contains(out, want) {
			t.Errorf("front matter lacks %q:\n%s", want, out)
		}
	}
	back, err := Parse("q.md", []byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if back.Title != s.Title || !reflect.DeepEqual(forget(back), forget(s)) {
		t.Errorf("round trip: got %+v, want %+v", forget(back), forget(s))
	}
}

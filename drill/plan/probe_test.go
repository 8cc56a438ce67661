package plan

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestDiskProbe runs the disk probe with the real dd in a directory of
// this machine, as on a lab or, over SSH, on a host.
func TestDiskProbe(t *testing.T) {
	dir := t.TempDir()
	out, err := LocalShell{}.Run(context.Background(), diskScript(shellQuote(dir), DiskProbe{Samples: 20, Appends: 50}, 3))
	if err != nil {
		t.Fatal(err)
	}
	d := Disk{Appends: 50}
	if err := parseDisk(out, &d); err != nil {
		t.Fatal(err)
	}
	if d.Dir != dir || d.FS == "" || d.Writers != 3 || d.SyncsPerS <= 0 || d.Latency.Count != 20 || d.Latency.P50 <= 0 || d.Latency.Max < d.Latency.P99 || len(d.Latency.Curve) != len(curvePercentiles) {
		t.Errorf("got %+v; want %s measured by 3 writers and 20 timed appends", d, dir)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("the probe left %d files in %s", len(left), dir)
	}
	// A directory that is not there is an error that says so.
	_, err = LocalShell{}.Run(context.Background(), diskScript(shellQuote(dir+"/none"), DiskProbe{Samples: 1, Appends: 1}, 1))
	if err == nil || !strings.Contains(err.Error(), "no directory") {
		t.Errorf("got %v, want no directory", err)
	}
	if err := parseDisk("fs ext4 /dev/x\n", &Disk{}); err == nil {
		t.Error("a probe that printed no time: got nil error")
	}
}

// TestParseClock reads chronyc -c tracking as chrony 4 prints it, and the
// configuration lines the probe greps.
func TestParseClock(t *testing.T) {
	var c Clock
	parseClock("tracking A9FEA97B,169.254.169.123,4,1733412345.123456789,-0.000012345,+0.000001000,0.000023000,-7.123,+0.002,0.045,0.000412000,0.000201000,64.5,Normal\n"+
		"conf maxslewrate 500\nconf makestep 1 1\n", &c)
	if c.Error != "" || !c.Synced || c.Reference != "169.254.169.123" || c.Stratum != 4 || c.FreqPPM != -7.123 || c.SkewPPM != 0.045 ||
		c.MaxSlewPPM != 500 || c.MakeStep != "1 1" || c.StepsAfterBoot() || c.OffsetMs > -0.012 || c.OffsetMs < -0.013 {
		t.Errorf("got %+v", c)
	}
	var d Clock
	parseClock("tracking 7F7F0101,,0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,Not synchronised\nconf makestep 1 -1\n", &d)
	if d.Synced || !d.StepsAfterBoot() || d.MaxSlewPPM != 0 {
		t.Errorf("got %+v; want not synced, steps after boot, no maxslewrate", d)
	}
	var e Clock
	parseClock("error chronyc tracking: 506 Cannot talk to daemon\n", &e)
	if e.Error == "" {
		t.Error("chronyc's error not kept")
	}
	// The script itself runs here (chronyc may or may not answer).
	out, err := LocalShell{}.Run(context.Background(), clockScript)
	if err != nil {
		t.Fatal(err)
	}
	var here Clock
	parseClock(out, &here)
	if here.Error == "" && here.Leap == "" {
		t.Errorf("the clock probe here printed %q: neither a report nor an error", out)
	}
}

func TestParseCPU(t *testing.T) {
	out, err := LocalShell{}.Run(context.Background(), cpuScript)
	if err != nil {
		t.Fatal(err)
	}
	a, err := parseCPU(out)
	if err != nil {
		t.Fatal(err)
	}
	spin := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(spin) {
	}
	out, _ = LocalShell{}.Run(context.Background(), cpuScript)
	b, err := parseCPU(out)
	if err != nil {
		t.Fatal(err)
	}
	if busy := busySince(a, b); b.total <= a.total || busy <= 0 || busy > 1 {
		t.Errorf("busy %v between %+v and %+v; want a share in (0, 1]", busy, a, b)
	}
	if _, err := parseCPU("intr 1 2 3"); err == nil {
		t.Error("not a cpu line: got nil error")
	}
}

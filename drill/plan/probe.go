// The probes: POSIX shell scripts that measure a host from the inside (its
// data disk's fsyncs, its NTP discipline, its CPU), run the same way on
// this machine (a lab's disk) and on a real host over SSH (infra/remote),
// so that a lab and a deployment are measured alike. They need only a
// shell, coreutils' dd and, for the clock, chronyc.

package plan

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Shell runs a script with /bin/sh as root on one host and returns its
// standard output (remote.Client is one).
type Shell interface {
	Run(ctx context.Context, script string) (string, error)
}

// LocalShell runs scripts on this machine.
type LocalShell struct{}

// Run runs script with /bin/sh here; a failure carries its stderr.
func (LocalShell) Run(ctx context.Context, script string) (string, error) {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-s")
	cmd.Stdin = strings.NewReader(script)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("plan: /bin/sh: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// DiskProbe is how the data disk is measured.
type DiskProbe struct {
	// Samples is how many single appends are timed for the latency.
	Samples int
	// Appends is how many appends each writer makes for the rate.
	Appends int
}

// DefaultDiskProbe is 300 timed appends and 1000 per writer for the rate.
var DefaultDiskProbe = DiskProbe{Samples: 300, Appends: 1000}

// RecordBytes is each append's size: about what a SET of a lock key with
// its token and TTL adds to the append-only file.
const RecordBytes = 64

// diskScript, in the directory dir (a shell word: quoted, or an expression
// that finds it on the host), times single 64-byte appends with O_DSYNC (dd oflag=dsync:
// the write and the fdatasync Redis does for appendfsync always), each by
// its own dd, whose own clock excludes its start-up; then writers dd's at
// once, each appending appends times, for the rate all of them get.
func diskScript(dir string, p DiskProbe, writers int) string {
	return fmt.Sprintf(`set -eu
export LC_ALL=C
dir=%s
[ -d "$dir" ] || { echo "no directory $dir" >&2; exit 3; }
echo "dir $dir"
f=$(mktemp "$dir/.redlab-plan-fsync.XXXXXX")
trap 'rm -f "$f" "$f".w*' EXIT
echo "fs $(df -PT "$dir" | awk 'NR==2 {print $2, $1}')"
i=0
while [ $i -lt %d ]; do
	dd if=/dev/zero of="$f" bs=%d count=1 oflag=dsync,append conv=notrunc 2>&1 | sed -n 's/.* copied, \([0-9.e+-]*\) s.*/lat \1/p'
	i=$((i+1))
done
w=0
while [ $w -lt %d ]; do
	dd if=/dev/zero of="$f.w$w" bs=%d count=%d oflag=dsync,append conv=notrunc 2>&1 | sed -n "s/.* copied, \([0-9.e+-]*\) s.*/rate $w \1/p" &
	w=$((w+1))
done
wait
`, dir, p.Samples, RecordBytes, writers, RecordBytes, p.Appends)
}

// Disk is one data disk's measurement.
type Disk struct {
	// Host names where it was measured; Dir the directory, FS its file
	// system type and device.
	Host string `json:"host"`
	Dir  string `json:"dir"`
	FS   string `json:"fs,omitempty"`
	// Nodes are the nodes (from 1) whose data is on it.
	Nodes []int `json:"nodes"`
	// Latency is one O_DSYNC append's, over Samples appends.
	Latency Dist `json:"latency"`
	// Writers appended Appends times each, at once: SyncsPerS in all.
	Writers   int     `json:"writers"`
	Appends   int     `json:"appends"`
	SyncsPerS float64 `json:"syncs_per_s"`
	Error     string  `json:"error,omitempty"`
}

// parseDisk reads diskScript's output.
func parseDisk(out string, d *Disk) error {
	var lat []time.Duration
	var longest time.Duration
	writers := 0
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "dir":
			d.Dir = strings.TrimSpace(strings.TrimPrefix(sc.Text(), "dir "))
		case "fs":
			d.FS = strings.Join(f[1:], " ")
		case "lat":
			s, err := seconds(f, 1)
			if err != nil {
				return err
			}
			lat = append(lat, s)
		case "rate":
			s, err := seconds(f, 2)
			if err != nil {
				return err
			}
			writers++
			longest = max(longest, s)
		}
	}
	if len(lat) == 0 || writers == 0 || longest <= 0 {
		return fmt.Errorf("plan: the disk probe printed %d latencies and %d rates (is dd GNU coreutils'?): %q", len(lat), writers, firstLines(out, 3))
	}
	d.Latency = distOf(lat)
	d.Writers = writers
	d.SyncsPerS = float64(writers*d.Appends) / longest.Seconds()
	return nil
}

func seconds(f []string, i int) (time.Duration, error) {
	if len(f) <= i {
		return 0, fmt.Errorf("plan: probe line %q: too short", strings.Join(f, " "))
	}
	v, err := strconv.ParseFloat(f[i], 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("plan: probe line %q: not a time in seconds", strings.Join(f, " "))
	}
	return time.Duration(v * 1e9), nil
}

// clockScript prints chronyc's tracking report as CSV and the lines of
// chrony's configuration that bound its corrections.
const clockScript = `export LC_ALL=C
if command -v chronyc >/dev/null 2>&1; then
	out=$(chronyc -c tracking 2>&1) && echo "tracking $out" || echo "error chronyc tracking: $out"
else
	echo "error chronyc is not installed"
fi
for f in /etc/chrony/chrony.conf /etc/chrony.conf /etc/chrony/conf.d/*.conf; do
	[ -f "$f" ] && sed -n 's/^[[:space:]]*\(maxslewrate\|makestep\)[[:space:]][[:space:]]*/conf \1 /p' "$f"
done
exit 0
`

// Clock is one host's NTP discipline, as chronyc reports it.
type Clock struct {
	Host string `json:"host"`
	// Synced: chronyd answered and its leap status is not "Not
	// synchronised".
	Synced bool `json:"synced"`
	// Reference is the source it follows; Stratum its stratum.
	Reference string `json:"reference,omitempty"`
	Stratum   int    `json:"stratum,omitempty"`
	// OffsetMs is the system clock's offset from NTP time (chrony's
	// "System time"); LastOffsetMs its last correction.
	OffsetMs     float64 `json:"offset_ms"`
	LastOffsetMs float64 `json:"last_offset_ms"`
	// FreqPPM is the clock's frequency error, ResidualPPM and SkewPPM the
	// error left and its bound.
	FreqPPM     float64 `json:"freq_ppm"`
	ResidualPPM float64 `json:"residual_ppm"`
	SkewPPM     float64 `json:"skew_ppm"`
	Leap        string  `json:"leap,omitempty"`
	// MaxSlewPPM is chrony.conf's maxslewrate (0: not set, the default
	// 83333 ppm applies); MakeStep its makestep line.
	MaxSlewPPM float64 `json:"max_slew_ppm"`
	MakeStep   string  `json:"makestep,omitempty"`
	// Error says why the discipline could not be read.
	Error string `json:"error,omitempty"`
}

// StepsAfterBoot reports whether makestep lets chronyd step the clock at
// any update (a negative limit), not only at the first ones.
func (c Clock) StepsAfterBoot() bool {
	f := strings.Fields(c.MakeStep)
	return len(f) == 2 && strings.HasPrefix(f[1], "-")
}

// parseClock reads clockScript's output.
func parseClock(out string, c *Clock) {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		head, rest, _ := strings.Cut(line, " ")
		switch head {
		case "error":
			c.Error = rest
		case "tracking":
			parseTracking(rest, c)
		case "conf":
			key, val, _ := strings.Cut(rest, " ")
			switch key {
			case "maxslewrate":
				if v, err := strconv.ParseFloat(strings.Fields(val + " x")[0], 64); err == nil {
					c.MaxSlewPPM = v
				}
			case "makestep":
				c.MakeStep = strings.TrimSpace(val)
			}
		}
	}
	if c.Error == "" && c.Leap == "" {
		c.Error = "no tracking report"
	}
}

// parseTracking reads `chronyc -c tracking`: reference ID, name, stratum,
// reference time, system time, last offset, RMS offset, frequency,
// residual frequency, skew, root delay, root dispersion, update interval,
// leap status.
func parseTracking(csv string, c *Clock) {
	f := strings.Split(strings.TrimSpace(csv), ",")
	if len(f) < 14 {
		c.Error = "chronyc tracking: " + strings.TrimSpace(csv)
		return
	}
	num := func(i int) float64 {
		v, _ := strconv.ParseFloat(strings.TrimSpace(f[i]), 64)
		return v
	}
	c.Reference = f[1]
	c.Stratum = int(num(2))
	c.OffsetMs, c.LastOffsetMs = num(4)*1e3, num(5)*1e3
	c.FreqPPM, c.ResidualPPM, c.SkewPPM = num(7), num(8), num(9)
	c.Leap = strings.TrimSpace(f[13])
	c.Synced = c.Leap != "" && !strings.EqualFold(c.Leap, "Not synchronised")
}

// cpuScript prints the first line of /proc/stat: the CPU time of all the
// host's cores.
const cpuScript = "head -n 1 /proc/stat\n"

// cpuTimes is /proc/stat's aggregate line: busy and total jiffies.
type cpuTimes struct{ busy, total uint64 }

func parseCPU(out string) (cpuTimes, error) {
	f := strings.Fields(out)
	if len(f) < 5 || f[0] != "cpu" {
		return cpuTimes{}, fmt.Errorf("plan: /proc/stat: %q", firstLines(out, 1))
	}
	var t cpuTimes
	for i, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("plan: /proc/stat: %q", firstLines(out, 1))
		}
		t.total += v
		// user nice system idle iowait irq softirq steal …: idle and
		// iowait are not busy.
		if i != 3 && i != 4 {
			t.busy += v
		}
	}
	return t, nil
}

// busySince is the share of the host's CPU busy between a and b.
func busySince(a, b cpuTimes) float64 {
	if b.total <= a.total {
		return 0
	}
	return float64(b.busy-a.busy) / float64(b.total-a.total)
}

// Dist is a latency distribution: its percentiles in milliseconds and its
// curve (percentile to ms) for the charts.
type Dist struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms,omitempty"`
	Max   float64 `json:"max_ms"`
	Curve []Point `json:"curve,omitempty"`
}

// Point is one point of a curve.
type Point struct {
	X float64 `json:"x"`
	Y float64 `json:"y"`
}

// distOf is the distribution of samples, nearest-rank percentiles.
func distOf(samples []time.Duration) Dist {
	s := append([]time.Duration(nil), samples...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	at := func(p float64) float64 {
		i := int(float64(len(s))*p/100+0.999999) - 1
		i = min(max(i, 0), len(s)-1)
		return msOf(s[i])
	}
	d := Dist{Count: int64(len(s)), P50: at(50), P99: at(99), P999: at(99.9), Max: msOf(s[len(s)-1])}
	for _, p := range curvePercentiles {
		d.Curve = append(d.Curve, Point{X: p, Y: at(p)})
	}
	return d
}

// curvePercentiles are the points of a distribution's curve.
var curvePercentiles = []float64{0, 10, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 100}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

func durMs(v float64) time.Duration { return time.Duration(v * 1e6) }

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func firstLines(s string, n int) string {
	lines := strings.SplitN(strings.TrimSpace(s), "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, " | ")
}

// errNoShell is a host the plan cannot run probes on.
var errNoShell = errors.New("plan: no shell on the host")

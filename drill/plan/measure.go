package plan

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlocklab/redlocklab/redlock"
)

// Measurements are what the plan measured, as plan.json keeps them.
type Measurements struct {
	Nodes  []NodeMeasure `json:"nodes"`
	Disks  []Disk        `json:"disks"`
	Clocks []Clock       `json:"clocks"`
	// SharedClock: every node runs on one host's clock (a lab).
	SharedClock bool         `json:"shared_clock"`
	Doctor      DoctorReport `json:"doctor"`
	Sweep       SweepResult  `json:"sweep"`
	// TookS is how long each measurement took, in seconds.
	TookS map[string]float64 `json:"took_s"`
}

// NodeMeasure is one node's round trips and what the doctor read of it.
type NodeMeasure struct {
	Node int    `json:"node"`
	Addr string `json:"addr"`
	Host string `json:"host"`
	// RTT is the round trip of a PING, one after another.
	RTT Dist `json:"rtt"`
	// ClockOffsetMs is the node's TIME minus this machine's clock at the
	// middle of the round trip.
	ClockOffsetMs float64 `json:"clock_offset_ms"`
	Appendfsync   string  `json:"appendfsync,omitempty"`
	Error         string  `json:"error,omitempty"`
}

// DoctorReport is the doctor's audit: its summary, and its findings that
// are not "ok".
type DoctorReport struct {
	Summary  redlock.Summary   `json:"summary"`
	Findings []redlock.Finding `json:"findings"`
}

// Measure takes every measurement the rules need, in an order that keeps
// them apart: the audit and the round trips on idle nodes, then the disks
// and the clocks, then the sweep, which loads the nodes.
func Measure(ctx context.Context, cfg Config) (Measurements, error) {
	s := cfg.Site
	m := Measurements{SharedClock: s.SharedClock, TookS: map[string]float64{}}
	timed := func(name string, fn func() error) error {
		start := time.Now()
		err := fn()
		m.TookS[name] = time.Since(start).Seconds()
		return err
	}
	if err := timed("doctor", func() error { return measureDoctor(ctx, cfg, &m) }); err != nil {
		return m, err
	}
	cfg.logf("doctor: %s", m.Doctor.Summary)
	if err := timed("round_trips", func() error { return measureRTT(ctx, cfg, &m) }); err != nil {
		return m, err
	}
	for _, n := range m.Nodes {
		cfg.logf("node%d %s: round trip p50 %.3f ms, p99 %.3f ms", n.Node, n.Addr, n.RTT.P50, n.RTT.P99)
	}
	_ = timed("disks", func() error { m.Disks = measureDisks(ctx, cfg); return nil })
	for _, d := range m.Disks {
		if d.Error != "" {
			cfg.logf("disk of %s: %s", d.Host, d.Error)
			continue
		}
		cfg.logf("disk of %s (%s): %.0f fsyncs/s by %s, one append p50 %.3f ms, p99 %.3f ms", d.Host, d.Dir, d.SyncsPerS, writers(d.Writers), d.Latency.P50, d.Latency.P99)
	}
	_ = timed("clocks", func() error { m.Clocks = measureClocks(ctx, s.Clocks); return nil })
	for _, c := range m.Clocks {
		if c.Error != "" {
			cfg.logf("clock of %s: %s", c.Host, c.Error)
		} else {
			cfg.logf("clock of %s: %s, offset %.3f ms, frequency %.3f ppm, maxslewrate %g", c.Host, c.Leap, c.OffsetMs, c.FreqPPM, c.MaxSlewPPM)
		}
	}
	if err := timed("sweep", func() (err error) { m.Sweep, err = runSweep(ctx, cfg); return err }); err != nil {
		return m, err
	}
	return m, ctx.Err()
}

// nodeClients are redis clients for the site's nodes, logged in as login.
func nodeClients(s *Site, login Login, timeout time.Duration) []*redis.Client {
	opts := []redlock.NodeOption{redlock.WithNodeTimeout(timeout), redlock.WithTLS(s.TLS)}
	if login.User != "" || login.Password != "" {
		opts = append(opts, redlock.WithAuth(login.User, login.Password))
	}
	return redlock.NewNodes(s.Nodes, opts...)
}

func closeAll(cs []*redis.Client) {
	for _, c := range cs {
		c.Close()
	}
}

// measureDoctor runs the doctor's audit as the audit login and keeps what
// it read of each node and its findings about the nodes (not those about
// this client's own timeouts, which the plan recommends).
func measureDoctor(ctx context.Context, cfg Config, m *Measurements) error {
	s := cfg.Site
	login := s.Audit
	if login.User == "" && login.Password == "" {
		login = s.Lock
	}
	nodes := nodeClients(s, login, time.Second)
	defer closeAll(nodes)
	cl, err := redlock.New(nodes)
	if err != nil {
		return fmt.Errorf("plan: doctor: %w", err)
	}
	defer cl.Close()
	rep, err := cl.Check(ctx)
	if err != nil {
		return fmt.Errorf("plan: doctor: %w", err)
	}
	m.Doctor.Summary = rep.Summary()
	for _, f := range rep.Findings {
		if f.Severity != redlock.Info && f.Check != "timeouts" && f.Check != "client" {
			m.Doctor.Findings = append(m.Doctor.Findings, f)
		}
	}
	m.Nodes = make([]NodeMeasure, len(s.Nodes))
	for i, n := range rep.Nodes {
		nm := NodeMeasure{Node: i + 1, Addr: s.Nodes[i], Host: s.Labels[i], ClockOffsetMs: msOfF(n.ClockOffset), Appendfsync: n.AppendFsync}
		if n.Err != nil {
			nm.Error = n.Err.Error()
		}
		m.Nodes[i] = nm
	}
	return nil
}

func msOfF(d time.Duration) float64 { return float64(d) / 1e6 }

// measureRTT times cfg.Pings PINGs to each node, one after another, all
// nodes at once.
func measureRTT(ctx context.Context, cfg Config, m *Measurements) error {
	nodes := nodeClients(cfg.Site, cfg.Site.Lock, time.Second)
	defer closeAll(nodes)
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	for i, c := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The first PING dials; it is not a round trip.
			if err := c.Ping(ctx).Err(); err != nil {
				errs[i] = fmt.Errorf("plan: node%d %s: %w", i+1, cfg.Site.Nodes[i], err)
				return
			}
			samples := make([]time.Duration, 0, cfg.Pings)
			for range cfg.Pings {
				t0 := time.Now()
				if err := c.Ping(ctx).Err(); err != nil {
					errs[i] = fmt.Errorf("plan: node%d %s: %w", i+1, cfg.Site.Nodes[i], err)
					return
				}
				samples = append(samples, time.Since(t0))
			}
			m.Nodes[i].RTT = distOf(samples)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// measureDisks runs the disk probe on every disk of the site, one after
// another (two disks of one machine would slow each other).
func measureDisks(ctx context.Context, cfg Config) []Disk {
	var out []Disk
	for _, ds := range cfg.Site.Disks {
		d := Disk{Host: ds.Host, Dir: ds.Dir, Nodes: ds.Nodes, Appends: cfg.Disk.Appends}
		dir := shellQuote(ds.Dir)
		if ds.DirScript != "" {
			dir = ds.DirScript
		}
		o, err := ds.Shell.Run(ctx, diskScript(dir, cfg.Disk, len(ds.Nodes)))
		if err == nil {
			err = parseDisk(o, &d)
		}
		if err != nil {
			d.Error = err.Error()
		}
		out = append(out, d)
	}
	return out
}

// measureClocks reads every host's NTP discipline at once.
func measureClocks(ctx context.Context, hosts []HostShell) []Clock {
	out := make([]Clock, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := Clock{Host: h.Host}
			o, err := h.Shell.Run(ctx, clockScript)
			if err != nil {
				c.Error = err.Error()
			} else {
				parseClock(o, &c)
			}
			out[i] = c
		}()
	}
	wg.Wait()
	return out
}

// Package plan turns measurements of a set of Redlock nodes into a
// deployment: the TTL for a critical section, the per-node timeout, the
// retry backoff, the drift factor, the restart delay and the unit's setting
// for it, the node count with the faults it tolerates, and the headroom at
// a target rate, each value citing the rule it follows (etcd's disk and
// timing rules, Kubernetes' lease rule, Chubby's lock-delay, the Redlock
// spec, the seed article) and the measurements it stands on.
//
// It measures only what those rules read (Measure): round trips to every
// node, each data disk's fsyncs (the lab's own disk, or each host's over
// SSH), the nodes' clock offsets and their NTP discipline (chronyc over
// SSH), the doctor's audit, and a sweep to the knee under the target's SLO.
// Recommend applies the rules. Verify runs the drills that test the
// recommendation (a node lost, a slow node, a power loss with the planned
// restart delay, holds at the planned TTL) and the wrong-value controls
// that must fail (a TTL shorter than the hold tail; no restart delay with
// appendfsync everysec), each verdict recomputed from its history.jsonl.
// Write puts it all in plan.md, plan.json, plan.html and a terraform.tfvars
// for infra/envs/aws (only the variables that root module declares), with
// the library's options as Go code.
//
// Like package explore, it orchestrates the drill engine and writes drill
// specs through package spec; it owns plan.json.
package plan

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/redlocklab/redlocklab/drill"
	"github.com/redlocklab/redlocklab/loadgen"
)

// Files the plan writes into its output directory.
const (
	JSONFile     = "plan.json"
	MarkdownFile = "plan.md"
	HTMLFile     = "plan.html"
	TFVarsFile   = "terraform.tfvars"
	// SweepDir holds the sweep (loadgen's run directories), VerifyDir the
	// verification drills (one directory per drill).
	SweepDir  = "sweep"
	VerifyDir = "verify"
)

// Login is a Redis ACL user.
type Login struct {
	User, Password string
}

// Site is where the nodes are and how the plan reaches them: a lab on this
// machine (LabSite), bare addresses (NodesSite: round trips, the audit and
// the sweep only) or the hosts of an inventory over SSH (HostsSite).
type Site struct {
	// Kind is "lab", "nodes" or "hosts".
	Kind string
	// Nodes are the lock nodes as clients reach them; TLS, when set, makes
	// every client speak TLS.
	Nodes []string
	TLS   *tls.Config
	// Lock is the lock clients' login (the sweep, the round trips); Audit
	// the doctor's (it reads CONFIG and INFO); empty: Lock's.
	Lock, Audit Login
	// Labels name the nodes' hosts, one per node ("node1", a host's name).
	Labels []string
	// Disks are the data disks to measure; Clocks the hosts whose NTP
	// discipline to read; CPUs the hosts whose CPU a sweep step watches
	// (this machine is always watched). SharedClock: every node runs on
	// one host's clock (a lab).
	Disks       []DiskSite
	Clocks      []HostShell
	CPUs        []HostShell
	SharedClock bool
	// Drill is how the verification drills run: each on a lab of its own
	// (Drill.Lab: binaries and directories), or on the hosts
	// (Drill.Hosts).
	Drill drill.Options
	// close releases what the site holds (SSH connections).
	close func() error
}

// DiskSite is one data disk: the nodes whose data it holds, the host and
// the directory to measure in. DirScript, when set, is a shell expression
// that finds the directory on the host instead of Dir.
type DiskSite struct {
	HostShell
	Nodes     []int
	Dir       string
	DirScript string
}

// HostShell is a host's name and a shell on it.
type HostShell struct {
	Host  string
	Shell Shell
}

// Close releases what the site holds; it may be called more than once.
func (s *Site) Close() error {
	if s.close == nil {
		return nil
	}
	err := s.close()
	s.close = nil
	return err
}

// Target is what the plan must meet.
type Target struct {
	// Rate is reservations per second.
	Rate float64
	// SLO are the conditions every sweep step must meet, like
	// acquire.p99<10ms.
	SLO []loadgen.Threshold
	// Hold is the critical section's hold time.
	Hold Hold
}

// Fixed are the values the user fixed; zero ones are the plan's to choose.
type Fixed struct {
	Nodes int
	TTL   time.Duration
}

// Config is one plan.
type Config struct {
	Site   *Site
	Target Target
	Fixed  Fixed
	// Sweep is how the knee is found.
	Sweep SweepConfig
	// Disk is how each data disk is measured; Pings how many PINGs time
	// each node's round trip.
	Disk  DiskProbe
	Pings int
	// Verify runs the verification drills after the plan.
	Verify bool
	// Out receives the plan's files; it must not hold a plan already.
	Out string
	// Command is the command line, recorded in plan.json.
	Command string
	// Terraform and InfraDir check the written terraform.tfvars against
	// infra/envs/aws (CheckTFVars); either empty: not checked.
	Terraform, InfraDir string
	Log                 io.Writer
}

// DefaultConfig is a plan with 10 s sweep steps, 300 timed appends per
// disk and 200 PINGs per node.
func DefaultConfig() Config {
	return Config{Sweep: DefaultSweep(), Disk: DefaultDiskProbe, Pings: 200}
}

// Validate checks the configuration before anything runs.
func (c *Config) Validate() error {
	switch {
	case c.Site == nil || len(c.Site.Nodes) == 0:
		return errors.New("plan: no nodes")
	case c.Target.Rate <= 0:
		return fmt.Errorf("plan: the target rate must be positive, got %v", c.Target.Rate)
	case len(c.Target.SLO) == 0:
		return errors.New("plan: no SLO: what must the target rate meet?")
	case c.Target.Hold.Max <= 0:
		return errors.New("plan: no hold time: give the critical section's hold (a distribution, or a load run's hold.hgrm)")
	case c.Fixed.Nodes < 0 || c.Fixed.TTL < 0:
		return errors.New("plan: a fixed node count or TTL must be positive")
	case c.Fixed.Nodes > 0 && c.Fixed.Nodes < 3:
		return fmt.Errorf("plan: %d nodes tolerate no failure: fix 3, 5 or 7", c.Fixed.Nodes)
	case c.Pings < 1 || c.Disk.Samples < 1 || c.Disk.Appends < 1:
		return errors.New("plan: the probes need at least one ping, one sample and one append")
	case c.Out == "":
		return errors.New("plan: no output directory")
	}
	if err := c.Sweep.validate(); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(c.Out, JSONFile)); err == nil {
		return fmt.Errorf("plan: %s already holds a plan (%s): choose a new output directory", c.Out, JSONFile)
	}
	return nil
}

// Run measures, recommends, verifies when asked, and writes the plan. The
// plan comes back even when the target is not met (Plan.Recommendation.
// Meets); an error is a plan that could not be made.
func Run(ctx context.Context, cfg Config) (*Plan, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	started := time.Now()
	m, err := Measure(ctx, cfg)
	if err != nil {
		return nil, err
	}
	p := newPlan(cfg, m, started)
	if cfg.Verify {
		v, err := Verify(ctx, cfg, p)
		if err != nil {
			return nil, err
		}
		p.Verify = v
	}
	p.TookS = time.Since(started).Seconds()
	if err := p.Write(cfg.Out); err != nil {
		return nil, err
	}
	if cfg.Terraform == "" || cfg.InfraDir == "" {
		p.TFVarsCheck = "not checked: no terraform binary or infra directory"
	} else {
		said, err := CheckTFVars(ctx, cfg.Terraform, cfg.InfraDir, filepath.Join(cfg.Out, TFVarsFile))
		if err != nil {
			return nil, fmt.Errorf("plan: the tfvars written are refused: %w", err)
		}
		p.TFVarsCheck = said
	}
	cfg.logf("%s: %s", TFVarsFile, p.TFVarsCheck)
	if err := p.Write(cfg.Out); err != nil {
		return nil, err
	}
	return p, nil
}

// logf writes a progress line.
func (c *Config) logf(format string, a ...any) {
	if c.Log != nil {
		fmt.Fprintf(c.Log, "plan: "+format+"\n", a...)
	}
}

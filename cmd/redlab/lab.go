package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/infra/lab/profile"
	"github.com/redlocklab/redlocklab/infra/node"
)

func newLabCmd(e *env) *cobra.Command {
	var dir string
	c := &cobra.Command{
		Use:   "lab",
		Short: "the local lab: up | status | down | list (OpenTofu/Terraform + supervised nodes)",
		Long: `The local lab: independent Redis nodes, each behind a fault-injecting proxy
and supervised by 'redlab node run', created with OpenTofu/Terraform
(infra/envs/local).

Node N's proxy (what clients use) is 127.0.0.1:base+N; 'lab up' and
'lab status' print every address of every node, and the whole port layout
is documented in infra/lab/layout.go. With 'lab up --machines' every node
is a systemd-nspawn machine.
The tofu/terraform binary: $REDLAB_TF, else tofu, else terraform on PATH,
else ./bin/tofu (make tools).`,
	}
	c.PersistentFlags().StringVar(&dir, "state-dir", "", stateDirUsage)
	c.AddCommand(newLabUpCmd(e, &dir), newLabStatusCmd(e, &dir), newLabDownCmd(e, &dir), newLabListCmd(e))
	return c
}

func newLabUpCmd(e *env, dir *string) *cobra.Command {
	cfg := lab.Config{Profile: profile.Profile{Nodes: lab.DefaultCount, Persistence: []lab.Persistence{lab.PersistAlways}, RestartDelay: lab.DefaultRestartDelay}, BasePort: lab.DefaultBasePort}
	var (
		verbose    bool
		monitoring bool
		ownerPID   int
		mcfg       = lab.MonitoringConfig{ScrapeInterval: lab.DefaultScrapeInterval}
	)
	c := &cobra.Command{
		Use:   "up",
		Short: "create the lab, or bring an existing one in line",
		Long: `Creates the lab, or brings an existing one in line with the flags given
(flags not given keep the existing lab's values). Prints the nodes; the last
line exports the lab's environment for the other commands:

  eval "$(redlab lab up | tail -1)"

after which doctor, load, serve, fault and lab status/down need neither
--nodes nor --state-dir.

With --monitoring it also starts one redis_exporter per node and a
Prometheus (on base+500) that scrapes them, the node supervisors, and every
'redlab serve' and 'redlab load --metrics-addr' run against this lab (they
register themselves), with the alerting and recording rules of
dashboards/prometheus. 'lab status' prints its URL; 'lab down' stops it.
A lab that has monitoring keeps it on a later 'lab up' unless
--monitoring=false.`,
		RunE: func(c *cobra.Command, _ []string) error {
			cfg.StateDir = stateDir(*dir)
			fs := c.Flags()
			var oldMon *lab.Monitoring
			// An existing lab keeps what the flags do not change.
			if old, err := lab.Open(cfg.StateDir); err == nil {
				if m, err := old.Monitoring(); err == nil {
					oldMon = m
					if !fs.Changed("monitoring") {
						monitoring = true
					}
					was := m.Config()
					if !fs.Changed("scrape-interval") {
						mcfg.ScrapeInterval = was.ScrapeInterval
					}
					if !fs.Changed("alert-for-max") {
						mcfg.AlertForMax = was.AlertForMax
					}
					mcfg.DataDir = was.DataDir
				}
				// The profile's fields the flags did not change keep the
				// lab's values.
				was := old.Config()
				if !fs.Changed("base-port") {
					cfg.BasePort = was.BasePort
				}
				if !fs.Changed("etcd") {
					cfg.EtcdServer = was.EtcdServer
				}
				keepProfile(fs, &cfg.Profile, was.Profile)
			}
			if fs.Changed("restart-delay") {
				cfg.NoRestartDelay = cfg.RestartDelay == 0
			}
			if err := cfg.Profile.Validate(); err != nil {
				return profileUsageError(err)
			}
			if !monitoring && (fs.Changed("scrape-interval") || fs.Changed("alert-for-max")) {
				return usageErrorf("--scrape-interval and --alert-for-max configure --monitoring")
			}
			if d := mcfg.ScrapeInterval; d < 100*time.Millisecond || d%time.Millisecond != 0 {
				return usageErrorf("--scrape-interval %v: want a whole number of milliseconds, at least 100ms", d)
			}
			if d := mcfg.AlertForMax; d < 0 || d%time.Millisecond != 0 {
				return usageErrorf("--alert-for-max %v: want 0 (the rules as written) or a whole number of milliseconds", d)
			}
			if fs.Changed("owner") {
				o, err := lab.OwnerOf(ownerPID)
				if err != nil {
					return usageErrorf("--owner %d: no such process (the lab would go down at once)", ownerPID)
				}
				cfg.Owner = &o
			}
			if verbose {
				cfg.Log = e.stderr
			}
			ctx, cancel := cancelOnSignal(c.Context(), e)
			defer cancel()
			start := time.Now()
			l, err := lab.Up(ctx, cfg)
			if err != nil {
				return err
			}
			var mon *lab.Monitoring
			switch {
			case monitoring:
				if mon, err = l.StartMonitoring(ctx, mcfg); err != nil {
					return err
				}
			case oldMon != nil:
				if err := lab.StopMonitoring(ctx, l.StateDir()); err != nil {
					return err
				}
			}
			replicas := ""
			if l.Replicas() > 0 {
				replicas = ", one asynchronous replica per node (not independent nodes: doctor flags them)"
			}
			if l.Machines() {
				replicas = ", every node a systemd-nspawn machine"
			}
			if l.SSH() {
				replicas += " in a network namespace of its own, with sshd (hosts " + l.HostsFile() + ")"
			}
			if l.TLS() {
				replicas += ", TLS only (CA " + l.TLSFiles().CA + ")"
			}
			if l.PowerLossLayer() {
				replicas += ", the power-loss filesystem under every data directory"
			}
			if l.EtcdUnsafeNoFsync() {
				replicas += ", etcd members without fsync (a negative control)"
			}
			fmt.Fprintf(e.stdout, "lab up in %v: %d nodes, persistence %s, restart delay %v%s, state %s\n",
				time.Since(start).Round(time.Millisecond), len(l.Nodes()), node.FormatPersistenceList(l.Config().Persistence), l.RestartDelay(), replicas, l.StateDir())
			for _, n := range l.Nodes() {
				if n.ReplicaAddr != "" {
					fmt.Fprintf(e.stdout, "  node %d  %s  (redis %s, control %s, replica %s via %s)\n", n.ID, n.Addr, n.RedisAddr, n.Control, n.ReplicaAddr, n.ReplicaLink)
					continue
				}
				fmt.Fprintf(e.stdout, "  node %d  %s  (redis %s, control %s)\n", n.ID, n.Addr, n.RedisAddr, n.Control)
			}
			for _, m := range l.EtcdMembers() {
				fmt.Fprintf(e.stdout, "  etcd %d  %s  (peer %s; etcd %s, peer %s; control %s)\n", m.ID, m.Client, m.Peer, m.EtcdClient, m.EtcdPeer, m.Control)
			}
			if mon != nil {
				printMonitoring(e.stdout, mon)
			}
			fmt.Fprintln(e.stdout, exportLine(labExports(l)))
			return nil
		},
	}
	fs := c.Flags()
	fs.IntVar(&cfg.Nodes, "count", cfg.Nodes, "number of nodes")
	fs.IntVar(&cfg.BasePort, "base-port", cfg.BasePort, "the lab's base port: node N's proxy is base+N (the layout: infra/lab/layout.go)")
	fs.Var((*persistenceListFlag)(&cfg.Persistence), "persistence", "persistence of every node (always, everysec, no-fsync or none), or one per node: always,always,everysec,everysec,everysec")
	fs.DurationVar(&cfg.RestartDelay, "restart-delay", cfg.RestartDelay, "how long a crashed node stays down (= the max lock TTL; 0s restarts it at once, the unsafe practice)")
	fs.IntVar(&cfg.Replicas, "replicas", 0, "1 gives every node an asynchronous replica that 'fault failover' promotes behind its address (the replicas-as-nodes mistake); 0: independent nodes")
	fs.BoolVar(&cfg.SSH, "ssh", false, "with --machines: every machine in a network namespace of its own (a veth pair to this host, no route beyond) running sshd with the lab's key for root; writes a hosts inventory and known_hosts into the state directory and exports REDLAB_HOSTS, for drill --hosts and fault --hosts (kept by a later lab up unless --ssh=false)")
	fs.BoolVar(&cfg.Machines, "machines", false, "boot every node as a Debian 12 systemd-nspawn machine from its cloud-init user data (real systemd, chrony and restart guard; needs root; kept by a later lab up unless --machines=false)")
	fs.BoolVar(&cfg.TLS, "tls", false, "every node TLS-only: a CA and node certificate written to the state directory's tls/, the export line with rediss:// nodes and "+envTLSCA+" (kept by a later lab up unless --tls=false)")
	fs.BoolVar(&cfg.PowerLoss, "power-loss", false, "put the power-loss filesystem (a FUSE layer that keeps only what each server fsynced) under every data directory, so that 'fault power-loss' can run; without it the servers write to plain directories, as on a real host, and power-loss is refused. It costs CPU and latency: measure without it (kept by a later lab up unless --power-loss=false)")
	fs.IntVar(&cfg.Etcd, "etcd", 0, "etcd members next to the Redis nodes (0, 1, 3 or 5), on ports from base+600+M; the etcd binary is $REDLAB_ETCD_BIN, else bin/etcd ('make etcd'), else etcd on PATH")
	fs.BoolVar(&cfg.EtcdUnsafeNoFsync, "etcd-unsafe-no-fsync", false, "a negative control: every etcd member runs with unsafe-no-fsync (never fsyncs), so a power cut of a majority loses acknowledged writes (kept by a later lab up unless --etcd-unsafe-no-fsync=false)")
	fs.StringVar(&cfg.InfraDir, "infra-dir", "", "the repository's infra directory (default: found from the current directory)")
	fs.BoolVarP(&verbose, "verbose", "v", false, "show tofu/terraform output")
	fs.IntVar(&ownerPID, "owner", 0, "the pid of the process the lab lives for (a script): once it ends, the lab takes itself down; default none, the lab stays up (a later lab up without --owner removes it)")
	fs.BoolVar(&monitoring, "monitoring", false, "also run one redis_exporter per node and a Prometheus with the lab's rules (kept by a later lab up unless --monitoring=false)")
	fs.DurationVar(&mcfg.ScrapeInterval, "scrape-interval", mcfg.ScrapeInterval, "with --monitoring: Prometheus's scrape and rule evaluation interval")
	fs.DurationVar(&mcfg.AlertForMax, "alert-for-max", 0, "with --monitoring: cap every alert's 'for:' at this (for drills and demos whose faults last seconds; 0 keeps the rules as written)")
	return c
}

// profileFlags maps each field of a lab profile (as profile.Error names
// it) to the flag of lab up that sets it.
var profileFlags = map[string]string{
	"nodes": "count", "persistence": "persistence", "restart_delay": "restart-delay", "replicas": "replicas",
	"machines": "machines", "ssh": "ssh", "tls": "tls", "etcd": "etcd", "etcd_unsafe_no_fsync": "etcd-unsafe-no-fsync",
	"power_loss": "power-loss",
}

// keepProfile sets the fields of p whose flag was not given to was's.
func keepProfile(fs *pflag.FlagSet, p *profile.Profile, was profile.Profile) {
	keep := func(field string) bool { return !fs.Changed(profileFlags[field]) }
	if keep("nodes") {
		p.Nodes = was.Nodes
	}
	if keep("persistence") {
		p.Persistence = was.Persistence
	}
	if keep("restart_delay") {
		p.RestartDelay, p.NoRestartDelay = was.RestartDelay, was.NoRestartDelay
	}
	if keep("replicas") {
		p.Replicas = was.Replicas
	}
	if keep("machines") {
		p.Machines = was.Machines
	}
	if keep("ssh") {
		// --machines=false alone drops SSH with the machines.
		p.SSH = was.SSH && p.Machines
	}
	if keep("tls") {
		p.TLS = was.TLS
	}
	if keep("etcd") {
		p.Etcd = was.Etcd
	}
	if keep("etcd_unsafe_no_fsync") {
		p.EtcdUnsafeNoFsync = was.EtcdUnsafeNoFsync
	}
	if keep("power_loss") {
		p.PowerLoss = was.PowerLoss
	}
}

// profileUsageError is a profile's broken rule as a usage error that names
// the flag to change.
func profileUsageError(err error) error {
	var pe *profile.Error
	if errors.As(err, &pe) {
		if f, ok := profileFlags[pe.Field]; ok {
			return usageErrorf("--%s: %s", f, pe.Rule)
		}
	}
	return usageErrorf("%v", err)
}

// printMonitoring writes the monitoring's addresses, as lab up and lab
// status show them.
func printMonitoring(w io.Writer, m *lab.Monitoring) {
	capNote := ""
	if m.AlertForMax > 0 {
		capNote = fmt.Sprintf(", alert for: capped at %v", time.Duration(m.AlertForMax))
	}
	fmt.Fprintf(w, "  monitoring  Prometheus %s  (scrape every %v%s; %d exporters from %s)\n",
		m.URL, time.Duration(m.ScrapeInterval), capNote, len(m.Exporters), firstExporter(m))
}

func firstExporter(m *lab.Monitoring) string {
	if len(m.Exporters) == 0 {
		return "-"
	}
	return m.Exporters[0].Addr
}

// envVar is one variable of the export line.
type envVar struct{ name, value string }

// labExports is the environment `lab up` hands to the shell: the other
// commands read it in place of --nodes, --state-dir and a login.
func labExports(l *lab.Lab) []envVar {
	vars := []envVar{
		{envNodes, l.NodeList().String()},
		{envStateDir, l.StateDir()},
		{lab.CredentialsEnv, l.CredentialsPath()},
	}
	if ca := l.TLSFiles().CA; ca != "" {
		vars = append(vars, envVar{envTLSCA, ca})
	}
	if eps := l.EtcdEndpoints(); len(eps) > 0 {
		vars = append(vars, envVar{envEtcd, strings.Join(eps, ",")})
	}
	if h := l.HostsFile(); h != "" {
		vars = append(vars, envVar{envHosts, h})
	}
	return vars
}

// exportLine renders vars as one line a POSIX shell can eval.
func exportLine(vars []envVar) string {
	var b strings.Builder
	b.WriteString("export")
	for _, v := range vars {
		b.WriteString(" " + v.name + "=" + shellQuote(v.value))
	}
	return b.String()
}

// shellQuote quotes s for a POSIX shell unless it is made only of
// characters no shell treats specially.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.,:/@%+=-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func newLabStatusCmd(e *env, dir *string) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "status",
		Short: "every node's state, pids, restarts, persistence and network faults",
		RunE: func(c *cobra.Command, _ []string) error {
			l, err := lab.Open(stateDir(*dir))
			if err != nil {
				return err
			}
			sts, err := l.Status(c.Context())
			if err != nil {
				return err
			}
			mon, err := l.Monitoring()
			if err != nil && !errors.Is(err, lab.ErrNoMonitoring) {
				return err
			}
			if asJSON {
				js := labStatusJSON{
					StateDir: l.StateDir(), Persistence: l.Persistence(), NodePersistence: l.NodePersistence(),
					RestartDelay: lab.Duration(l.RestartDelay()), Replicas: l.Replicas(), Machines: l.Machines(), Hosts: l.HostsFile(), TLS: l.TLS(), Addrs: l.Addrs(), Nodes: sts, Monitoring: mon,
				}
				if len(l.EtcdMembers()) > 0 {
					if js.Etcd, err = l.EtcdStatus(c.Context()); err != nil {
						return err
					}
					js.EtcdLeader = etcdLeaderOf(c.Context(), l)
				}
				return writeJSON(e.stdout, js)
			}
			printLabStatus(e.stdout, l, sts)
			if len(l.EtcdMembers()) > 0 {
				ests, err := l.EtcdStatus(c.Context())
				if err != nil {
					return err
				}
				printEtcdStatus(e.stdout, l, ests, etcdLeaderOf(c.Context(), l))
			}
			if mon != nil {
				fmt.Fprintf(e.stdout, "monitoring: Prometheus %s (scrape every %v); exporters", mon.URL, time.Duration(mon.ScrapeInterval))
				for _, x := range mon.Exporters {
					fmt.Fprintf(e.stdout, " %d=%s", x.Node, x.Addr)
				}
				fmt.Fprintln(e.stdout)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON, for scripts")
	return c
}

// labStatusJSON is `lab status --json`: the lab's settings and every node's
// status as the lab records it.
type labStatusJSON struct {
	StateDir string `json:"state_dir"`
	// Persistence is the profile every node shares, or "mixed".
	Persistence     lab.Persistence   `json:"persistence"`
	NodePersistence []lab.Persistence `json:"node_persistence"`
	RestartDelay    lab.Duration      `json:"restart_delay"`
	Replicas        int               `json:"replicas"`
	Machines        bool              `json:"machines"`
	// Hosts is the hosts inventory of a lab with --ssh.
	Hosts string           `json:"hosts,omitempty"`
	TLS   bool             `json:"tls,omitempty"`
	Addrs []string         `json:"addrs"`
	Nodes []lab.NodeStatus `json:"nodes"`
	// Monitoring is the lab's Prometheus and exporters, when on.
	Monitoring *lab.Monitoring `json:"monitoring,omitempty"`
	// Etcd is every etcd member's status, EtcdLeader the member that leads
	// (0: none now); both absent without etcd members.
	Etcd       []lab.EtcdMemberStatus `json:"etcd,omitempty"`
	EtcdLeader int                    `json:"etcd_leader,omitempty"`
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printLabStatus(w io.Writer, l *lab.Lab, sts []lab.NodeStatus) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := "NODE\tSTATE\tADDR\tREDIS PID\tSUPERVISOR PID\tRESTARTS\tPERSISTENCE\tNETWORK\tSINCE"
	if l.Replicas() > 0 {
		header += "\tREPLICA"
	}
	fmt.Fprintln(tw, header)
	for _, st := range sts {
		network := "ok"
		switch {
		case st.Partitioned:
			network = "partitioned"
		case st.Latency > 0:
			network = fmt.Sprintf("+%v±%v", time.Duration(st.Latency), time.Duration(st.Jitter))
		}
		since := "-"
		if !st.Since.IsZero() {
			since = st.Since.Format("15:04:05")
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s", st.ID, st.State, st.Addr(),
			pidOrDash(st.RedisPID), pidOrDash(st.SupervisorPID), st.Restarts, st.Persistence, network, since)
		if l.Replicas() > 0 {
			fmt.Fprintf(tw, "\t%s", replicaText(st.Replica))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	delay := l.RestartDelay().String()
	if l.NoRestartDelay() {
		delay = "0s (a crashed node restarts at once)"
	}
	fmt.Fprintf(w, "\nrestart delay %s. Power-loss fidelity: %s\n", delay, l.Persistence().KillNote())
	if l.Machines() {
		fmt.Fprintln(w, "Nodes are systemd-nspawn machines: redlock-redis.service, chrony and the restart guard under real systemd; REDIS PID is the host's view.")
	}
}

// etcdLeaderOf is the member that leads now, 0 when none does.
func etcdLeaderOf(ctx context.Context, l *lab.Lab) int {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	id, err := l.EtcdLeader(ctx)
	if err != nil {
		return 0
	}
	return id
}

// printEtcdStatus writes the etcd members' table of lab status.
func printEtcdStatus(w io.Writer, l *lab.Lab, sts []lab.EtcdMemberStatus, leader int) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ETCD	STATE	CLIENT	ROLE	ETCD PID	SUPERVISOR PID	RESTARTS	NETWORK	TERM	SINCE")
	ms := l.EtcdMembers()
	for i, st := range sts {
		role := "-"
		switch {
		case st.ID == leader:
			role = "leader"
		case st.MemberID != "":
			role = "follower"
		}
		network := "ok"
		switch {
		case st.Partitioned:
			network = "partitioned"
		case st.Latency > 0:
			network = fmt.Sprintf("+%v±%v", time.Duration(st.Latency), time.Duration(st.Jitter))
		}
		since := "-"
		if !st.Since.IsZero() {
			since = st.Since.Format("15:04:05")
		}
		term := "-"
		if st.RaftTerm > 0 {
			term = fmt.Sprint(st.RaftTerm)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", st.ID, st.State, ms[i].Client, role,
			pidOrDash(st.EtcdPID), pidOrDash(st.SupervisorPID), st.Restarts, network, term, since)
	}
	tw.Flush()
	if leader == 0 {
		fmt.Fprintln(w, "no etcd leader now: a majority of the members names none (an election, or a quorum down)")
	}
}

// replicaText sums a replicated node's pair up in a few words.
func replicaText(r *lab.ReplicaStatus) string {
	if r == nil {
		return "-"
	}
	var words []string
	if r.Promoted {
		words = append(words, "promoted: the replica is the master")
	} else {
		words = append(words, "replica "+string(r.State))
	}
	switch {
	case r.LinkCut:
		words = append(words, "link cut")
	case r.Synced:
		words = append(words, "synced")
	default:
		words = append(words, "not synced")
	}
	return strings.Join(words, ", ")
}

func pidOrDash(pid int) string {
	if pid == 0 {
		return "-"
	}
	return fmt.Sprint(pid)
}

func newLabDownCmd(e *env, dir *string) *cobra.Command {
	var verbose, all, force bool
	c := &cobra.Command{
		Use:   "down",
		Short: "destroy the lab: no process, port or file of it is left",
		Long: `Destroys the lab in the state directory: no process, port or file of it is
left.

With --all it destroys instead every lab on the machine whose owner is gone
(see 'lab list'), and with --all --force every lab on the machine.`,
		RunE: func(c *cobra.Command, _ []string) error {
			if force && !all {
				return usageErrorf("--force is for --all: 'lab down' without --all takes its lab down anyway")
			}
			if all && c.Flags().Changed("state-dir") {
				return usageErrorf("--all takes down labs wherever they are: leave out --state-dir")
			}
			cfg := lab.Config{StateDir: stateDir(*dir)}
			if verbose {
				cfg.Log = e.stderr
			}
			ctx, cancel := cancelOnSignal(c.Context(), e)
			defer cancel()
			if all {
				return downAll(ctx, e, cfg, force)
			}
			if err := lab.Down(ctx, cfg); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "lab down: %s is clear\n", cfg.StateDir)
			return nil
		},
	}
	c.Flags().BoolVarP(&verbose, "verbose", "v", false, "show tofu/terraform output")
	c.Flags().BoolVar(&all, "all", false, "take down every lab on the machine whose owner is gone (orphans), instead of the one in --state-dir")
	c.Flags().BoolVar(&force, "force", false, "with --all: every lab on the machine, owned or not")
	return c
}

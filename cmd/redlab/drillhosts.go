package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/redlocklab/redlocklab/drill"
	"github.com/redlocklab/redlocklab/infra/hosts"
	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/infra/remote"
)

// drillHostsOptions are `redlab drill`'s flags for real hosts.
type drillHostsOptions struct {
	hostsOptions
	username string
	deadMan  time.Duration
}

func addDrillHostsFlags(fs *pflag.FlagSet, o *drillHostsOptions) {
	addHostsFlags(fs, &o.hostsOptions)
	fs.StringVar(&o.username, "username", "redlock", "with --hosts: the Redis user of the lock clients (password: "+envPassword+")")
	fs.DurationVar(&o.deadMan, "dead-man", 10*time.Minute, "with --hosts: a fault without a length heals itself this long after it started, should the run die")
}

// config checks the specs against the inventory and returns the drill's
// hosts configuration, or nil without --hosts.
func (o *drillHostsOptions) config(e *env, specs []*drill.Spec, monitoring, machines bool) (*drill.HostsConfig, error) {
	if o.file == "" {
		return nil, nil
	}
	if err := hostsLabFlags(monitoring, machines); err != nil {
		return nil, err
	}
	cfg, err := o.hostsConfig(e)
	if err != nil {
		return nil, err
	}
	var refused []string
	for _, s := range specs {
		if err := drill.CheckHosts(s, cfg.Inventory); err != nil {
			refused = append(refused, strings.TrimPrefix(err.Error(), "drill: "))
		}
	}
	if len(refused) > 0 {
		return nil, usageErrorf("--hosts: %d of %d drill specs cannot run over SSH on %s:\n  %s",
			len(refused), len(specs), o.file, strings.Join(refused, "\n  "))
	}
	return cfg, nil
}

// hostsConfig reads the inventory of --hosts and the login, the hosts
// configuration of a drill or a search on them.
func (o *drillHostsOptions) hostsConfig(e *env) (*drill.HostsConfig, error) {
	inv, err := hosts.Load(o.file)
	if err != nil {
		return nil, &exitError{code: exitUsage, err: err}
	}
	if o.deadMan <= 0 {
		return nil, usageErrorf("--dead-man must be positive")
	}
	username, password := o.username, os.Getenv(envPassword)
	if password == "" && os.Getenv(lab.CredentialsEnv) != "" {
		// The machines of `lab up --machines --ssh`: its export line names
		// the lab's credentials, not a password.
		l := login{role: node.UserRedlock}
		var err error
		if username, password, err = l.resolve(); err != nil {
			return nil, err
		}
	}
	return &drill.HostsConfig{
		Inventory: inv,
		Remote:    remote.Config{KnownHosts: inv.KnownHosts, InsecureIgnoreHostKey: o.insecure, Warn: e.stderr},
		Username:  username,
		Password:  password,
		DeadMan:   o.deadMan,
	}, nil
}

// hostsLabFlags refuses the lab's flags beside --hosts.
func hostsLabFlags(monitoring, machines bool) error {
	if monitoring || machines {
		return usageErrorf("--hosts runs on real hosts: --monitoring and --machines are for the lab")
	}
	return nil
}

// checkHosts is `drill --check --hosts`: for every spec, whether it runs
// over SSH on the inventory's hosts, with the guards it leaves out, or why
// it does not. It is a usage error, after the table, when one does not.
func (o *drillHostsOptions) checkHosts(w io.Writer, specs []*drill.Spec) error {
	inv, err := hosts.Load(o.file)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DRILL\tOVER SSH\tWHY NOT, OR WHAT IS LEFT OUT")
	refused := 0
	for _, s := range specs {
		if err := drill.CheckHosts(s, inv); err != nil {
			refused++
			why := strings.TrimPrefix(strings.TrimPrefix(err.Error(), "drill: "), "not on real hosts: ")
			fmt.Fprintf(tw, "%s\tno\t%s\n", s.Name, why)
			continue
		}
		note := "-"
		if left := etcdGuards(s); len(left) > 0 {
			note = "runs without " + strings.Join(left, ", ") + ": they lock on etcd members, which a hosts inventory does not list (they run in the lab)"
		}
		fmt.Fprintf(tw, "%s\tyes\t%s\n", s.Name, note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%d of %d drill specs run over SSH on %s (%d hosts).\n", len(specs)-refused, len(specs), o.file, len(inv.Hosts))
	if refused > 0 {
		return usageErrorf("%d of %d drill specs cannot run over SSH on %s: the table says why", refused, len(specs), o.file)
	}
	return nil
}

// etcdGuards are the guards of a spec that runs on hosts with etcd members
// that carry guards only: they are left out (see drill.CheckHosts).
func etcdGuards(s *drill.Spec) []string {
	if s.Lab.Etcd == 0 {
		return nil
	}
	var out []string
	for _, g := range s.Workload.Guards {
		if g.NeedsEtcd() {
			out = append(out, string(g))
		}
	}
	return out
}

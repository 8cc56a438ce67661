package main

import (
	"os"
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

// hostsConfig checks the specs against the inventory and returns the
// drill's hosts configuration, or nil without --hosts.
func (o *drillHostsOptions) config(e *env, specs []*drill.Spec, monitoring, machines bool) (*drill.HostsConfig, error) {
	if o.file == "" {
		return nil, nil
	}
	if monitoring || machines {
		return nil, usageErrorf("--hosts runs on real hosts: --monitoring and --machines are for the lab")
	}
	inv, err := hosts.Load(o.file)
	if err != nil {
		return nil, &exitError{code: exitUsage, err: err}
	}
	for _, s := range specs {
		if err := drill.CheckHosts(s, inv); err != nil {
			return nil, usageErrorf("--hosts: %v", err)
		}
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

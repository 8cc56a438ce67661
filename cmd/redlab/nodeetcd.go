package main

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/redlocklab/redlocklab/infra/lab"
)

// The etcd members' `redlab node etcd-start | etcd-run | etcd-stop`, what
// infra/envs/local's provisioners run for each member: renaming a flag
// breaks every lab with etcd.

// etcdMemberOptions are the flags of `node etcd-start` and `node etcd-run`.
type etcdMemberOptions struct {
	id                           int
	stateDir                     string
	clientPort, peerPort         int
	etcdClientPort, etcdPeerPort int
	controlPort                  int
	restartDelay                 time.Duration
	etcdServer                   string
	confB64                      string
}

func (o *etcdMemberOptions) flags(fs *pflag.FlagSet) {
	fs.IntVar(&o.id, "id", 0, "member number, from 1 (required)")
	fs.StringVar(&o.stateDir, "state-dir", "", "the lab's state directory (required)")
	fs.IntVar(&o.clientPort, "client-port", 0, "the client front's port (what clients use)")
	fs.IntVar(&o.peerPort, "peer-port", 0, "the peer front's port (what the other members use)")
	fs.IntVar(&o.etcdClientPort, "etcd-client-port", 0, "etcd's own client port")
	fs.IntVar(&o.etcdPeerPort, "etcd-peer-port", 0, "etcd's own peer port")
	fs.IntVar(&o.controlPort, "control-port", 0, "control endpoint port")
	fs.DurationVar(&o.restartDelay, "restart-delay", 0, "how long a crashed member stays down")
	fs.StringVar(&o.etcdServer, "etcd-server", "", "the etcd binary (absolute)")
	fs.StringVar(&o.confB64, "conf-b64", "", "the rendered etcd.yml, base64")
}

// spec validates the flags. full=false means: resume from the files on disk.
func (o *etcdMemberOptions) spec() (spec lab.EtcdMemberSpec, full bool, err error) {
	if o.id < 1 {
		return spec, false, errors.New("--id N (from 1) is required")
	}
	if o.stateDir == "" {
		return spec, false, errors.New("--state-dir is required")
	}
	dir, err := filepath.Abs(o.stateDir)
	if err != nil {
		return spec, false, err
	}
	if o.confB64 == "" {
		return lab.EtcdMemberSpec{ID: o.id, StateDir: dir}, false, nil
	}
	conf, err := base64.StdEncoding.DecodeString(o.confB64)
	if err != nil {
		return spec, false, fmt.Errorf("--conf-b64: %w", err)
	}
	spec = lab.EtcdMemberSpec{
		ID: o.id, StateDir: dir, ClientPort: o.clientPort, PeerPort: o.peerPort,
		EtcdClientPort: o.etcdClientPort, EtcdPeerPort: o.etcdPeerPort, ControlPort: o.controlPort,
		RestartDelay: lab.Duration(o.restartDelay), EtcdServer: o.etcdServer, Conf: conf,
	}
	return spec, true, spec.Validate()
}

func newNodeEtcdStartOrRunCmd(e *env, sub string) *cobra.Command {
	var o etcdMemberOptions
	c := &cobra.Command{
		Use: sub + " --id N --state-dir DIR [--client-port P --peer-port P --etcd-client-port P --etcd-peer-port P --control-port P --etcd-server PATH --conf-b64 B64]",
		RunE: func(c *cobra.Command, _ []string) error {
			spec, full, err := o.spec()
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			if full {
				if err := lab.PrepareEtcdMember(spec); err != nil {
					return err
				}
			}
			if sub == "etcd-start" {
				self, err := os.Executable()
				if err != nil {
					return err
				}
				if err := lab.StartEtcdMember(c.Context(), self, spec.StateDir, spec.ID); err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "etcd member %d started\n", spec.ID)
				return nil
			}
			ctx, cancel := cancelOnSignal(c.Context(), e)
			defer cancel()
			return lab.RunEtcdMember(ctx, spec.StateDir, spec.ID, e.stdout)
		},
	}
	if sub == "etcd-start" {
		c.Short = "write an etcd member's files and start its supervisor detached"
		c.Long = `Writes the etcd member's files and starts its supervisor detached; returns
once etcd listens through its client front (healthy needs a majority of the
cluster: 'lab up' waits for that). Without --conf-b64 the files already in
DIR/etcdN are used (restarting a supervisor that died).`
	} else {
		c.Short = "an etcd member's supervisor itself, in the foreground"
		c.Long = `The etcd member's supervisor itself, in the foreground: etcd, its client
and peer fronts and the control endpoint. A signal stops etcd cleanly.`
	}
	o.flags(c.Flags())
	return c
}

func newNodeEtcdStopCmd(e *env) *cobra.Command {
	var (
		id    int
		dir   string
		purge bool
	)
	c := &cobra.Command{
		Use:   "etcd-stop --id N --state-dir DIR [--purge]",
		Short: "stop an etcd member's supervisor (etcd cleanly) and anything it left",
		RunE: func(c *cobra.Command, _ []string) error {
			if id < 1 || dir == "" {
				return usageErrorf("--id N (from 1) and --state-dir DIR are required")
			}
			abs, err := filepath.Abs(dir)
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			if err := lab.StopEtcdMember(c.Context(), abs, id, purge); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "etcd member %d stopped\n", id)
			return nil
		},
	}
	c.Flags().IntVar(&id, "id", 0, "member number, from 1 (required)")
	c.Flags().StringVar(&dir, "state-dir", "", "the lab's state directory (required)")
	c.Flags().BoolVar(&purge, "purge", false, "remove the member's directory afterwards")
	return c
}

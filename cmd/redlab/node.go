package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// newNodeCmd is `redlab node`. The flags of node start/run/stop are what
// infra/envs/local's provisioners pass: renaming one breaks every lab.
func newNodeCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use: "node",
		// The lab's Terraform runs it; people use lab, fault and drill.
		// Hidden from redlab's help, it still answers --help.
		Hidden: true,
		Short:  "one lab node's or etcd member's supervisor: start | run | stop | etcd-start | etcd-run | etcd-stop (run by infra/envs/local)",
		Long: `One lab node's supervisor. The lab's Terraform provisioners call these; a
person needs them only to repair a lab by hand ('redlab lab up' is the usual
way in).`,
	}
	c.AddCommand(newNodeStartOrRunCmd(e, "start"), newNodeStartOrRunCmd(e, "run"), newNodeStopCmd(e),
		newNodeEtcdStartOrRunCmd(e, "etcd-start"), newNodeEtcdStartOrRunCmd(e, "etcd-run"), newNodeEtcdStopCmd(e))
	return c
}

// nodeOptions are the flags of `node start` and `node run`.
type nodeOptions struct {
	id                           int
	stateDir                     string
	port, redisPort, controlPort int
	restartDelay                 time.Duration
	redisServer                  string
	confB64, guardB64            string
	replicaPort, replicaLinkPort int
	replicaConfB64               string
	machineAddress, ntpAddress   string
	machineNetns, machineSSHDir  string
	cloudInitB64                 string
	plainDisk                    bool
}

func (o *nodeOptions) flags(fs *pflag.FlagSet) {
	fs.IntVar(&o.id, "id", 0, "node number, from 1 (required)")
	fs.StringVar(&o.stateDir, "state-dir", "", "the lab's state directory (required)")
	fs.IntVar(&o.port, "port", 0, "proxy port (what clients use)")
	fs.IntVar(&o.redisPort, "redis-port", 0, "redis-server's private port")
	fs.IntVar(&o.controlPort, "control-port", 0, "control endpoint port (default port+200)")
	fs.DurationVar(&o.restartDelay, "restart-delay", 0, "the restart guard's delay (for start timeouts)")
	fs.StringVar(&o.redisServer, "redis-server", "", "redis-server binary (default: redis-server on PATH)")
	fs.StringVar(&o.confB64, "conf-b64", "", "rendered redis.conf, base64")
	fs.StringVar(&o.guardB64, "guard-b64", "", "rendered restart guard script, base64")
	fs.IntVar(&o.replicaPort, "replica-port", 0, "the node's replica's redis-server port (replicated labs only)")
	fs.IntVar(&o.replicaLinkPort, "replica-link-port", 0, "the port of the front the replica's replication link goes through")
	fs.StringVar(&o.replicaConfB64, "replica-conf-b64", "", "the replica's rendered redis.conf, base64")
	fs.StringVar(&o.machineAddress, "machine-address", "", "machines only: the machine's own address (redis-server binds it): loopback, or with --machine-netns its end of the veth pair")
	fs.StringVar(&o.ntpAddress, "ntp-address", "", "machines only: the address the supervisor serves NTP on: loopback, or with --machine-netns the host's end of the veth pair")
	fs.StringVar(&o.machineNetns, "machine-netns", "", "machines only: run the machine in a network namespace of this name, joined to the host by a veth pair")
	fs.StringVar(&o.machineSSHDir, "machine-ssh-dir", "", "machines with --machine-netns only: the directory of the machine's SSH host key and root's authorized_keys (its sshd runs)")
	fs.StringVar(&o.cloudInitB64, "cloud-init-b64", "", "machines only: the node's cloud-init user data, base64 (boots the node as a machine)")
	fs.BoolVar(&o.plainDisk, "plain-disk", false, "a plain data directory, not the power-loss filesystem (power-loss is then refused)")
}

// spec validates the flags. full=false means: resume from the files on disk.
func (o *nodeOptions) spec() (spec node.Spec, full bool, err error) {
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
	if o.confB64 == "" && o.guardB64 == "" {
		return node.Spec{ID: o.id, StateDir: dir}, false, nil
	}
	conf, err := base64.StdEncoding.DecodeString(o.confB64)
	if err != nil {
		return spec, false, fmt.Errorf("--conf-b64: %w", err)
	}
	guard, err := base64.StdEncoding.DecodeString(o.guardB64)
	if err != nil {
		return spec, false, fmt.Errorf("--guard-b64: %w", err)
	}
	var replicaConf []byte
	if o.replicaConfB64 != "" {
		if replicaConf, err = base64.StdEncoding.DecodeString(o.replicaConfB64); err != nil {
			return spec, false, fmt.Errorf("--replica-conf-b64: %w", err)
		}
	}
	var machine *node.MachineSpec
	if o.cloudInitB64 != "" || o.machineAddress != "" || o.ntpAddress != "" {
		if o.cloudInitB64 == "" || o.machineAddress == "" || o.ntpAddress == "" {
			return spec, false, errors.New("--cloud-init-b64, --machine-address and --ntp-address go together")
		}
		ud, err := base64.StdEncoding.DecodeString(o.cloudInitB64)
		if err != nil {
			return spec, false, fmt.Errorf("--cloud-init-b64: %w", err)
		}
		machine = &node.MachineSpec{Address: o.machineAddress, NTPAddress: o.ntpAddress, UserData: ud, Netns: o.machineNetns, SSHDir: o.machineSSHDir}
	} else if o.machineNetns != "" || o.machineSSHDir != "" {
		return spec, false, errors.New("--machine-netns and --machine-ssh-dir go with --cloud-init-b64")
	}
	if o.controlPort == 0 && o.port > 0 {
		o.controlPort = o.port + 200
	}
	spec = node.Spec{
		ID: o.id, StateDir: dir, Port: o.port, RedisPort: o.redisPort, ControlPort: o.controlPort,
		RestartDelay: node.Duration(o.restartDelay), RedisServer: o.redisServer, Conf: conf, Guard: guard,
		ReplicaPort: o.replicaPort, ReplicaLinkPort: o.replicaLinkPort, ReplicaConf: replicaConf,
		Machine: machine, PlainDisk: o.plainDisk,
	}
	return spec, true, spec.Validate()
}

// prepare is the supervisorOptions of `node start` and `node run`.
func (o *nodeOptions) prepare() (stateDir string, id int, write func() error, err error) {
	spec, full, err := o.spec()
	if err != nil || !full {
		return spec.StateDir, spec.ID, nil, err
	}
	return spec.StateDir, spec.ID, func() error { return node.Prepare(spec) }, nil
}

func newNodeStartOrRunCmd(e *env, sub string) *cobra.Command {
	use := sub + " --id N --state-dir DIR [--port P --redis-port RP [--control-port CP] --conf-b64 B64 --guard-b64 B64 [--replica-port RP2 --replica-link-port LP --replica-conf-b64 B64] [--machine-address A --ntp-address T --cloud-init-b64 B64 [--machine-netns NS [--machine-ssh-dir DIR]]] [--plain-disk]]"
	if sub == "start" {
		c := newSupervisorCmd(&nodeOptions{}, use, startDetached(e, node.Start, "node %d up\n"))
		c.Short = "write the node's files and start its supervisor detached"
		c.Long = `Writes the node's files and starts its supervisor detached; returns once the
node answers through its proxy. Without --conf-b64 the files already in
DIR/nodeN are used (restarting a supervisor that died).`
		return c
	}
	c := newSupervisorCmd(&nodeOptions{}, use, runForeground(e, node.Run))
	c.Short = "the node's supervisor itself, in the foreground"
	c.Long = `The node's supervisor itself, in the foreground: restart guard, redis-server,
proxy and control endpoint. A signal stops redis-server cleanly.`
	return c
}

func newNodeStopCmd(e *env) *cobra.Command {
	return newSupervisorStopCmd(e, "stop", "stop the supervisor (redis-server cleanly) and anything it left", "node", "node", node.Stop)
}

// supervisorOptions are the flags of a supervisor's start and run commands:
// a node's (nodeOptions) or an etcd member's (etcdMemberOptions).
type supervisorOptions interface {
	flags(fs *pflag.FlagSet)
	// prepare validates the flags (an error is a usage error) and returns
	// the state directory, the id, and write, which writes the files the
	// flags describe (nil: resume from the files already on disk).
	prepare() (stateDir string, id int, write func() error, err error)
}

// newSupervisorCmd is a supervisor's start or run command: it validates o,
// writes the files and does the rest with do.
func newSupervisorCmd(o supervisorOptions, use string, do func(c *cobra.Command, stateDir string, id int) error) *cobra.Command {
	c := &cobra.Command{
		Use: use,
		RunE: func(c *cobra.Command, _ []string) error {
			dir, id, write, err := o.prepare()
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			if write != nil {
				if err := write(); err != nil {
					return err
				}
			}
			return do(c, dir, id)
		},
	}
	o.flags(c.Flags())
	return c
}

// startDetached is what a start command does: start the supervisor
// detached, running this binary, and print done (a format of the id).
func startDetached(e *env, start func(ctx context.Context, redlab, stateDir string, id int) error, done string) func(*cobra.Command, string, int) error {
	return func(c *cobra.Command, dir string, id int) error {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		if err := start(c.Context(), self, dir, id); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, done, id)
		return nil
	}
}

// runForeground is what a run command does: run the supervisor until a
// signal.
func runForeground(e *env, run func(ctx context.Context, stateDir string, id int, logw io.Writer) error) func(*cobra.Command, string, int) error {
	return func(c *cobra.Command, dir string, id int) error {
		ctx, cancel := cancelOnSignal(c.Context(), e)
		defer cancel()
		return run(ctx, dir, id, e.stdout)
	}
}

// newSupervisorStopCmd is a supervisor's stop command (sub): stop stops the
// one with --id in --state-dir. noun names it in the flags' help ("node",
// "member"), what in the output ("node", "etcd member").
func newSupervisorStopCmd(e *env, sub, short, noun, what string, stop func(ctx context.Context, stateDir string, id int, purge bool) error) *cobra.Command {
	var (
		id    int
		dir   string
		purge bool
	)
	c := &cobra.Command{
		Use:   sub + " --id N --state-dir DIR [--purge]",
		Short: short,
		RunE: func(c *cobra.Command, _ []string) error {
			if id < 1 || dir == "" {
				return usageErrorf("--id N (from 1) and --state-dir DIR are required")
			}
			abs, err := filepath.Abs(dir)
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			if err := stop(c.Context(), abs, id, purge); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%s %d stopped\n", what, id)
			return nil
		},
	}
	c.Flags().IntVar(&id, "id", 0, noun+" number, from 1 (required)")
	c.Flags().StringVar(&dir, "state-dir", "", "the lab's state directory (required)")
	c.Flags().BoolVar(&purge, "purge", false, "remove the "+noun+"'s directory afterwards")
	return c
}

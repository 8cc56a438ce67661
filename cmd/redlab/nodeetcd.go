package main

import (
	"encoding/base64"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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
	plainDisk                    bool
	unsafeNoFsync                bool
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
	fs.BoolVar(&o.plainDisk, "plain-disk", false, "a plain data directory, not the power-loss filesystem (power-loss is then refused)")
	fs.BoolVar(&o.unsafeNoFsync, "unsafe-no-fsync", false, "declares that the rendered etcd.yml turns fsync off (a negative control); without it such a file is refused")
}

// spec validates the flags. full=false means: resume from the files on disk.
func (o *etcdMemberOptions) spec() (spec node.EtcdMemberSpec, full bool, err error) {
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
		return node.EtcdMemberSpec{ID: o.id, StateDir: dir}, false, nil
	}
	conf, err := base64.StdEncoding.DecodeString(o.confB64)
	if err != nil {
		return spec, false, fmt.Errorf("--conf-b64: %w", err)
	}
	spec = node.EtcdMemberSpec{
		ID: o.id, StateDir: dir, ClientPort: o.clientPort, PeerPort: o.peerPort,
		EtcdClientPort: o.etcdClientPort, EtcdPeerPort: o.etcdPeerPort, ControlPort: o.controlPort,
		RestartDelay: node.Duration(o.restartDelay), EtcdServer: o.etcdServer, Conf: conf, PlainDisk: o.plainDisk,
		UnsafeNoFsync: o.unsafeNoFsync,
	}
	return spec, true, spec.Validate()
}

// prepare is the supervisorOptions of `node etcd-start` and `node etcd-run`.
func (o *etcdMemberOptions) prepare() (stateDir string, id int, write func() error, err error) {
	spec, full, err := o.spec()
	if err != nil || !full {
		return spec.StateDir, spec.ID, nil, err
	}
	return spec.StateDir, spec.ID, func() error { return node.PrepareEtcdMember(spec) }, nil
}

func newNodeEtcdStartOrRunCmd(e *env, sub string) *cobra.Command {
	use := sub + " --id N --state-dir DIR [--client-port P --peer-port P --etcd-client-port P --etcd-peer-port P --control-port P --etcd-server PATH --conf-b64 B64 [--plain-disk]]"
	if sub == "etcd-start" {
		c := newSupervisorCmd(&etcdMemberOptions{}, use, startDetached(e, node.StartEtcdMember, "etcd member %d started\n"))
		c.Short = "write an etcd member's files and start its supervisor detached"
		c.Long = `Writes the etcd member's files and starts its supervisor detached; returns
once etcd listens through its client front (healthy needs a majority of the
cluster: 'lab up' waits for that). Without --conf-b64 the files already in
DIR/etcdN are used (restarting a supervisor that died).`
		return c
	}
	c := newSupervisorCmd(&etcdMemberOptions{}, use, runForeground(e, node.RunEtcdMember))
	c.Short = "an etcd member's supervisor itself, in the foreground"
	c.Long = `The etcd member's supervisor itself, in the foreground: etcd, its client
and peer fronts and the control endpoint. A signal stops etcd cleanly.`
	return c
}

func newNodeEtcdStopCmd(e *env) *cobra.Command {
	return newSupervisorStopCmd(e, "etcd-stop", "stop an etcd member's supervisor (etcd cleanly) and anything it left", "member", "etcd member", node.StopEtcdMember)
}

package plan

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/redlocklab/redlocklab/drill"
	"github.com/redlocklab/redlocklab/infra/hosts"
	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/infra/remote"
)

// LabSite is a running lab on this machine: its nodes' fronts (what
// clients use), its lock and monitoring users, its state directory's disk
// (every node's data is on it) and this machine's clock, which every node
// shares. The verification drills run on labs of their own, with the
// lab's binaries.
func LabSite(l *lab.Lab) (*Site, error) {
	creds, err := l.Credentials()
	if err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	tlsCfg, err := l.TLSConfig()
	if err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	addrs := l.Addrs()
	s := &Site{Kind: "lab", Nodes: addrs, TLS: tlsCfg,
		Lock:  Login{User: creds.Redlock.Name, Password: creds.Redlock.Password},
		Audit: Login{User: creds.Monitor.Name, Password: creds.Monitor.Password}, SharedClock: true}
	var nodes []int
	for i := range addrs {
		s.Labels = append(s.Labels, fmt.Sprintf("node%d", i+1))
		nodes = append(nodes, i+1)
	}
	here := HostShell{Host: thisMachine, Shell: LocalShell{}}
	s.Disks = []DiskSite{{HostShell: here, Nodes: nodes, Dir: l.StateDir()}}
	s.Clocks = []HostShell{here}
	c := l.Config()
	s.Drill.Lab = lab.Config{Redlab: c.Redlab, Terraform: c.Terraform, InfraDir: c.InfraDir, RedisServer: c.RedisServer, EtcdServer: c.EtcdServer}
	s.Drill.Lab.Machines = l.Machines()
	return s, nil
}

// NodesSite is nodes known only by their addresses: the plan measures the
// round trips, runs the audit and the sweep, but reaches no disk or clock.
// The verification drills run on labs of this machine, with the lab
// configuration labCfg (binaries; zero: the defaults).
func NodesSite(addrs []string, tlsCfg *tls.Config, lock, audit Login, labCfg lab.Config) *Site {
	s := &Site{Kind: "nodes", Nodes: addrs, TLS: tlsCfg, Lock: lock, Audit: audit}
	for i := range addrs {
		s.Labels = append(s.Labels, fmt.Sprintf("node%d", i+1))
	}
	s.Drill.Lab = labCfg
	return s
}

// hostDataDir finds a host's Redis data directory: the dir of the
// redis.conf infra/modules/redis-node installs, else its default.
const hostDataDir = `"$(d=$(awk '$1 == "dir" {print $2; exit}' /etc/redis/redlock.conf 2>/dev/null); echo "${d:-/var/lib/redis}")"`

// HostsSite is the hosts of an inventory, reached over SSH with rc: each
// host's Redis node, its data disk (the node's data directory) and its
// clock, read as root; the verification drills run on the hosts. Close
// ends the SSH connections.
func HostsSite(ctx context.Context, inv *hosts.Inventory, rc remote.Config, lock, audit Login) (*Site, error) {
	if len(inv.Hosts) == 0 {
		return nil, errors.New("plan: the inventory lists no hosts")
	}
	s := &Site{Kind: "hosts", Nodes: inv.RedisAddresses(), Lock: lock, Audit: audit}
	var clients []*remote.Client
	s.close = func() error {
		var errs []error
		for _, c := range clients {
			errs = append(errs, c.Close())
		}
		return errors.Join(errs...)
	}
	for i, h := range inv.Hosts {
		c, err := remote.Dial(ctx, h, rc)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("plan: host %s: %w", h.Label(i+1), err)
		}
		clients = append(clients, c)
		hs := HostShell{Host: h.Label(i + 1), Shell: c}
		s.Labels = append(s.Labels, hs.Host)
		s.Disks = append(s.Disks, DiskSite{HostShell: hs, Nodes: []int{i + 1}, DirScript: hostDataDir})
		s.Clocks = append(s.Clocks, hs)
		s.CPUs = append(s.CPUs, hs)
	}
	s.Drill.Hosts = &drill.HostsConfig{Inventory: inv, Remote: rc, Username: lock.User, Password: lock.Password}
	return s, nil
}

var _ Shell = (*remote.Client)(nil)

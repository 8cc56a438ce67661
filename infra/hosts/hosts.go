// Package hosts owns the hosts inventory: the file that tells redlab which
// real hosts a drill reaches over SSH, how to log in to each, and where its
// Redis answers. `redlab hosts from-tofu` writes it from the outputs of
// infra/envs/aws; `redlab fault --hosts`, `redlab heal --hosts` and
// `redlab drill --hosts` read it.
//
// The file is JSON (any YAML that means the same is read too, so a hand-kept
// inventory may carry comments):
//
//	{
//	  "drill_environment": true,
//	  "known_hosts": "~/.ssh/known_hosts",
//	  "hosts": [
//	    {"name": "node-1", "address": "10.0.1.10", "redis": "10.0.1.10:6379",
//	     "user": "admin", "port": 22, "key": "~/.ssh/redlock.pem",
//	     "type": "vm", "instance_id": "i-0123456789abcdef0"}
//	  ]
//	}
//
// Reading is strict: an unknown field, a field given twice or a missing
// required one is an error that names the field and its line.
package hosts

import (
	"errors"
	"fmt"
	"net"
	"strconv"
)

// Type is how a host runs: it decides which faults can be injected and how
// (a VM's power loss is a kernel crash; a lab machine's is the lab's power
// cut, which SSH cannot reach).
type Type string

// The host types.
const (
	// VM is a virtual or physical machine with its own kernel: power loss
	// and clock steps are real.
	VM Type = "vm"
	// Machine is a systemd-nspawn machine of the lab (infra/machine): it
	// shares the host's kernel and clock.
	Machine Type = "machine"
)

// Types are the valid host types, in the order the errors list them.
var Types = []Type{VM, Machine}

// DefaultPort is the SSH port when a host names none.
const DefaultPort = 22

// Inventory is one hosts file.
type Inventory struct {
	// DrillEnvironment marks hosts that may be weakened for a drill
	// (appendfsync everysec, no restart delay, no persistence). Production
	// hosts leave it false, and redlab refuses to weaken them.
	DrillEnvironment bool `json:"drill_environment"`
	// KnownHosts is the known_hosts file the host keys are checked against;
	// empty: ~/.ssh/known_hosts.
	KnownHosts string `json:"known_hosts,omitempty"`
	Hosts      []Host `json:"hosts"`
}

// Host is one host of the inventory; drills and faults number them from 1
// in file order, as the lab numbers its nodes.
type Host struct {
	// Name is for people and reports; empty: "host-N".
	Name string `json:"name,omitempty"`
	// Address is where SSH reaches the host (a name or an IP).
	Address string `json:"address"`
	// Redis is host:port of the Redis node the lock clients use.
	Redis string `json:"redis"`
	// User is the SSH user; not root: commands run under sudo -n.
	User string `json:"user"`
	// Port is the SSH port; 0 in the file means DefaultPort.
	Port int `json:"port,omitempty"`
	// Key is the private key file; empty: the agent at SSH_AUTH_SOCK.
	Key string `json:"key,omitempty"`
	// Type is vm or machine.
	Type Type `json:"type"`
	// InstanceID is the cloud's id of the VM (for a hypervisor stop), if any.
	InstanceID string `json:"instance_id,omitempty"`
	// OwnNetns marks a lab machine that runs in a network namespace of its
	// own (`redlab lab up --machines --ssh` writes it): iptables and netem
	// inside it act on the machine's interfaces only, so it takes the
	// network faults a VM takes. Only with type machine; a machine without
	// it shares its host's network and refuses them.
	OwnNetns bool `json:"own_netns,omitempty"`
}

// Label returns the host's name, or host-N for the n-th host (from 1).
func (h Host) Label(n int) string {
	if h.Name != "" {
		return h.Name
	}
	return "host-" + strconv.Itoa(n)
}

// SSHAddress returns host:port for the SSH connection.
func (h Host) SSHAddress() string {
	p := h.Port
	if p == 0 {
		p = DefaultPort
	}
	return net.JoinHostPort(h.Address, strconv.Itoa(p))
}

// RedisAddresses returns every host's Redis address in order, as --nodes
// takes them.
func (inv *Inventory) RedisAddresses() []string {
	out := make([]string, len(inv.Hosts))
	for i, h := range inv.Hosts {
		out[i] = h.Redis
	}
	return out
}

// Pick returns the hosts numbered ns (from 1), or an error naming a number
// that is out of range.
func (inv *Inventory) Pick(ns ...int) ([]Host, error) {
	out := make([]Host, 0, len(ns))
	for _, n := range ns {
		if n < 1 || n > len(inv.Hosts) {
			return nil, fmt.Errorf("%w: host %d: the inventory has hosts 1 to %d", ErrInvalid, n, len(inv.Hosts))
		}
		out = append(out, inv.Hosts[n-1])
	}
	return out, nil
}

// ErrInvalid marks a request the inventory cannot satisfy (a host number out
// of range, weakening hosts that are not a drill environment).
var ErrInvalid = errors.New("hosts: invalid")

// ErrNotDrillEnvironment is returned when a drill would weaken hosts whose
// inventory is not marked drill_environment: true.
var ErrNotDrillEnvironment = fmt.Errorf("%w: the inventory is not marked \"drill_environment\": true, so its hosts are not weakened (appendfsync, restart delay, persistence); mark it only for hosts that serve no real locks", ErrInvalid)

// CheckDrillEnvironment returns ErrNotDrillEnvironment unless the inventory
// is marked as a drill environment.
func (inv *Inventory) CheckDrillEnvironment() error {
	if !inv.DrillEnvironment {
		return ErrNotDrillEnvironment
	}
	return nil
}

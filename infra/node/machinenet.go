// A machine of its own network namespace (MachineSpec.Netns, a lab's
// `lab up --machines --ssh`), and the sshd it runs (MachineSpec.SSHDir).

package node

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/redlocklab/redlocklab/infra/machine"
)

// A machine with MachineSpec.Netns runs in the network namespace of that
// name (ip netns, /run/netns/NAME), which its supervisor creates before the
// first boot and deletes once the machine is gone. One veth pair joins it
// to this host: the host's end, named like the namespace, holds NTPAddress
// (the supervisor's NTP server binds it), the machine's end, eth0, holds
// Address (redis-server and sshd bind it), both in one /30. Nothing else
// is configured: the namespace has no default route and the host forwards
// nothing, so the machine reaches this host and nothing beyond, and only
// this host reaches it. iptables rules and netem qdiscs inside act on the
// machine's own interfaces, which is what makes the network faults over
// SSH (infra/hostfault) safe on it.
//
// The addresses and names are the lab's (infra/lab, layout.go); a sweep
// (sweepMachine) deletes a namespace a dead supervisor left, by the name in
// the node's spec.

// netnsName is what MachineSpec.Netns may be: also the host's end of the
// veth pair, so at most 15 characters (IFNAMSIZ).
var netnsName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,14}$`)

// machineIfName is the machine's end of the veth pair.
const machineIfName = "eth0"

// netPrefix is the length of the network of a machine's veth pair.
const netPrefix = 30

// validateNetns checks a namespaced machine's addresses: IPv4, not
// loopback, distinct, in one /30 and not its network or broadcast address.
func (m *MachineSpec) validateNetns(id int) error {
	if !netnsName.MatchString(m.Netns) {
		return fmt.Errorf("node %d: network namespace %q: want a lowercase name of at most 15 characters (it names the host's veth too)", id, m.Netns)
	}
	mask := net.CIDRMask(netPrefix, 32)
	var nets []string
	for name, a := range map[string]string{"machine address": m.Address, "NTP address": m.NTPAddress} {
		ip := net.ParseIP(a).To4()
		if ip == nil || ip.IsLoopback() || ip.IsUnspecified() || ip.IsMulticast() {
			return fmt.Errorf("node %d: %s %q: want an IPv4 address of the machine's veth pair (not loopback)", id, name, a)
		}
		if host := ip[3] &^ mask[3]; host == 0 || host == 3 {
			return fmt.Errorf("node %d: %s %s is the network or broadcast address of its /%d", id, name, a, netPrefix)
		}
		nets = append(nets, ip.Mask(mask).String())
	}
	if m.Address == m.NTPAddress || nets[0] != nets[1] {
		return fmt.Errorf("node %d: machine address %s and NTP address %s: want two addresses of one /%d", id, m.Address, m.NTPAddress, netPrefix)
	}
	return nil
}

// netnsPath is where ip netns keeps the namespace.
func netnsPath(name string) string { return filepath.Join("/run/netns", name) }

// ipCmd runs ip with args; its stderr is in the error.
func ipCmd(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("node: ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// setupNetns creates the machine's namespace and veth pair, after removing
// whatever a previous supervisor left under the same name.
func setupNetns(ctx context.Context, m *MachineSpec) (err error) {
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("node: a machine's network namespace needs ip (Debian: apt-get install iproute2): %w", err)
	}
	if err := deleteNetns(ctx, m.Netns); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = deleteNetns(context.WithoutCancel(ctx), m.Netns)
		}
	}()
	ns := m.Netns
	for _, args := range [][]string{
		{"netns", "add", ns},
		{"link", "add", ns, "type", "veth", "peer", "name", machineIfName, "netns", ns},
		{"addr", "add", fmt.Sprintf("%s/%d", m.NTPAddress, netPrefix), "dev", ns},
		{"link", "set", ns, "up"},
		{"-n", ns, "addr", "add", fmt.Sprintf("%s/%d", m.Address, netPrefix), "dev", machineIfName},
		{"-n", ns, "link", "set", machineIfName, "up"},
		{"-n", ns, "link", "set", "lo", "up"},
	} {
		if err := ipCmd(ctx, args...); err != nil {
			return err
		}
	}
	return nil
}

// deleteNetns removes the namespace and the host's end of its veth pair,
// if they exist (the pair goes with the namespace once no process is left
// in it; the link is deleted too, so nothing waits for that).
func deleteNetns(ctx context.Context, name string) error {
	if name == "" {
		return nil
	}
	var errs []error
	if _, err := net.InterfaceByName(name); err == nil {
		if err := ipCmd(ctx, "link", "del", name); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := os.Stat(netnsPath(name)); err == nil {
		if err := ipCmd(ctx, "netns", "del", name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// specNetns returns the network namespace the spec in a node directory
// names, if any.
func specNetns(dir string) string {
	var s Spec
	if readJSONFile(filepath.Join(dir, specFile), &s) != nil || s.Machine == nil {
		return ""
	}
	return s.Machine.Netns
}

// The files of MachineSpec.SSHDir, written there by the lab.
const (
	SSHAuthorizedKeysFile = "authorized_keys"
	SSHHostKeyFile        = "ssh_host_ed25519_key"
)

// sshFiles returns what the machine's sshd needs in its root before the
// first boot: the host key (so that its owner knows it without trusting a
// first use), root's authorized key, and a drop-in that binds sshd to the
// machine's address with keys only. sshd is Debian's ssh.service, which
// the image starts only where a host key exists (infra/machine).
func sshFiles(m *MachineSpec) (map[string]machine.File, error) {
	if m.SSHDir == "" {
		return nil, nil
	}
	read := func(name string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(m.SSHDir, name))
		if err != nil {
			return nil, fmt.Errorf("node: the machine's ssh files: %w", err)
		}
		return b, nil
	}
	key, err := read(SSHHostKeyFile)
	if err != nil {
		return nil, err
	}
	pub, err := read(SSHHostKeyFile + ".pub")
	if err != nil {
		return nil, err
	}
	auth, err := read(SSHAuthorizedKeysFile)
	if err != nil {
		return nil, err
	}
	conf := "# Written by the lab (infra/node): sshd on the machine's own address, keys only.\n" +
		"ListenAddress " + m.Address + "\n" +
		"HostKey /etc/ssh/" + SSHHostKeyFile + "\n" +
		"PasswordAuthentication no\n" +
		"KbdInteractiveAuthentication no\n" +
		"PermitRootLogin prohibit-password\n"
	return map[string]machine.File{
		"/etc/ssh/" + SSHHostKeyFile:                    {Data: key, Mode: 0o600},
		"/etc/ssh/" + SSHHostKeyFile + ".pub":           {Data: pub, Mode: 0o644},
		"/root/.ssh/authorized_keys":                    {Data: auth, Mode: 0o600},
		"/etc/ssh/sshd_config.d/50-redlab-machine.conf": {Data: []byte(conf), Mode: 0o644},
	}, nil
}

// ntpAllow is the network the machine's NTP server answers.
func ntpAllow(m *MachineSpec) string {
	if m.Netns == "" {
		return "127.0.0.0/8"
	}
	ip := net.ParseIP(m.Address).To4().Mask(net.CIDRMask(netPrefix, 32))
	return fmt.Sprintf("%s/%d", ip, netPrefix)
}

// DeleteMachineNetns removes a machine's network namespace and its veth
// pair by name, if they exist: what a lab's Down does for a node whose
// directory, and so its sweep, is gone.
func DeleteMachineNetns(ctx context.Context, name string) error {
	if !netnsName.MatchString(name) {
		return fmt.Errorf("node: network namespace %q: not a machine's", name)
	}
	return deleteNetns(ctx, name)
}

// udpBound reports whether a UDP socket of this network namespace is bound
// to addr (IPv4) and port, from /proc/net/udp.
func udpBound(addr string, port int) bool {
	ip := net.ParseIP(addr).To4()
	if ip == nil {
		return false
	}
	data, err := os.ReadFile("/proc/net/udp")
	if err != nil {
		return false
	}
	// The kernel prints the address as a native-endian 32-bit word in hex.
	want := fmt.Sprintf("%08X:%04X", binary.NativeEndian.Uint32(ip), port)
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[1] == want {
			return true
		}
	}
	return false
}

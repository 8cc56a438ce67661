package lab

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/redlocklab/redlocklab/infra/hosts"
	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/internal/atomicfile"
)

// Machines over SSH (Config.SSH): before apply, Up makes the lab's SSH key
// (sshDir/id_ed25519) and one host key per node (sshDir/nodeN), which the
// node's supervisor writes into the machine's root before its first boot,
// with the lab's public key as root's authorized_keys (package node,
// machinenet.go): the files, not the cloud-init user data, carry them, so
// the user data stays the module's, as a VM would get it. The host keys
// go into sshDir/known_hosts at once, so a client knows every machine
// without trusting a first use. After apply Up writes HostsFile, the
// machines as an infra/hosts inventory (type machine, own_netns, a drill
// environment), for `redlab drill --hosts` and `redlab fault --hosts`.
const (
	sshDir = "ssh"
	// HostsFile is the hosts inventory of a lab with SSH, in the state
	// directory.
	HostsFile = "hosts.json"
	// sshKeyFile is the lab's private key, in sshDir.
	sshKeyFile = "id_ed25519"
	// knownHostsFile is in sshDir.
	knownHostsFile = "known_hosts"
	// sshPort is where the machines' sshd listens.
	sshPort = 22
)

// HostsFile returns the path of the lab's hosts inventory, or "" when the
// lab has no SSH.
func (l *Lab) HostsFile() string {
	if !l.f.SSH {
		return ""
	}
	return filepath.Join(l.stateDir, HostsFile)
}

// ensureSSH makes what is missing of the lab's SSH key, the nodes' host
// keys and their authorized_keys, and writes known_hosts.
func ensureSSH(cfg Config) error {
	dir := filepath.Join(cfg.StateDir, sshDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	clientPub, err := ensureKey(filepath.Join(dir, sshKeyFile))
	if err != nil {
		return err
	}
	var kh strings.Builder
	kh.WriteString("# The host keys of the lab's machines, made by the lab before their first boot.\n")
	for id := 1; id <= cfg.Nodes; id++ {
		nd := filepath.Join(dir, "node"+strconv.Itoa(id))
		if err := os.MkdirAll(nd, 0o700); err != nil {
			return fmt.Errorf("lab: %w", err)
		}
		hostPub, err := ensureKey(filepath.Join(nd, node.SSHHostKeyFile))
		if err != nil {
			return err
		}
		if err := atomicfile.WriteFile(filepath.Join(nd, node.SSHAuthorizedKeysFile), ssh.MarshalAuthorizedKey(clientPub), 0o600); err != nil {
			return fmt.Errorf("lab: %w", err)
		}
		addr, _ := machineNetAddresses(cfg.BasePort + id)
		kh.WriteString(knownhosts.Line([]string{knownhosts.Normalize(net.JoinHostPort(addr, strconv.Itoa(sshPort)))}, hostPub) + "\n")
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, knownHostsFile), []byte(kh.String()), 0o644); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	return nil
}

// ensureKey returns the public half of the ed25519 key at path (OpenSSH
// format, mode 0600, its public key in path.pub), making it first when
// there is none.
func ensureKey(path string) (ssh.PublicKey, error) {
	if b, err := os.ReadFile(path); err == nil {
		signer, err := ssh.ParsePrivateKey(b)
		if err != nil {
			return nil, fmt.Errorf("lab: %s: %w (remove it to make a new one)", path, err)
		}
		return signer.PublicKey(), nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("lab: %w", err)
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("lab: ssh key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "redlab lab")
	if err != nil {
		return nil, fmt.Errorf("lab: ssh key: %w", err)
	}
	spub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("lab: ssh key: %w", err)
	}
	if err := atomicfile.WriteFile(path+".pub", ssh.MarshalAuthorizedKey(spub), 0o644); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	if err := atomicfile.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	return spub, nil
}

// writeHosts writes the lab's hosts inventory, or removes one a lab with
// SSH left when this one has none.
func writeHosts(cfg Config, nodes []Node) error {
	path := filepath.Join(cfg.StateDir, HostsFile)
	if !cfg.SSH {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("lab: %w", err)
		}
		return nil
	}
	inv := &hosts.Inventory{
		// The lab's own machines: weakening them for a drill is what they
		// are for.
		DrillEnvironment: true,
		KnownHosts:       filepath.Join(cfg.StateDir, sshDir, knownHostsFile),
	}
	for _, n := range nodes {
		addr, _ := machineNetAddresses(cfg.BasePort + n.ID)
		inv.Hosts = append(inv.Hosts, hosts.Host{
			Name:     "node-" + strconv.Itoa(n.ID),
			Address:  addr,
			Port:     sshPort,
			Redis:    n.RedisAddr,
			User:     "root",
			Key:      filepath.Join(cfg.StateDir, sshDir, sshKeyFile),
			Type:     hosts.Machine,
			OwnNetns: true,
		})
	}
	return hosts.Write(path, inv)
}

// checkMachineNet fails when the host already holds the address of the
// machine behind port's veth pair on an interface that is not that pair
// (another network of 10/8 here, or a lab with another layout).
func checkMachineNet(port int) error {
	_, hostAddr := machineNetAddresses(port)
	ifs, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	_, pair, _ := net.ParseCIDR(hostAddr + "/30")
	for _, ifc := range ifs {
		if ifc.Name == machineNetns(port) {
			continue // the node's own, from an earlier up
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && (pair.Contains(ipn.IP) || ipn.Contains(pair.IP)) && ipn.IP.To4() != nil {
				return fmt.Errorf("the machine's veth network %s overlaps %s on %s (choose another --base-port)", pair, ipn, ifc.Name)
			}
		}
	}
	return nil
}

// deleteMachineNet removes the network namespace and veth pair of the
// machine behind port, if they are left.
func deleteMachineNet(ctx context.Context, port int) error {
	return node.DeleteMachineNetns(ctx, machineNetns(port))
}

package lab

import (
	"fmt"
	"net"
	"strconv"

	"github.com/redlocklab/redlocklab/infra/node"
)

// The lab's port layout: offsets from Config.BasePort (DefaultBasePort),
// each range holding one port per node N or etcd member M, from 1, all on
// 127.0.0.1 (a machine lab's redis-server listens on 127.80.x.y instead,
// x.y the proxy port's two bytes):
//
//	base+N        node N's proxy, the fault front: what clients use
//	base+100+N    node N's redis-server (private)
//	base+200+N    node N's control endpoint (faults, status)
//	base+300+N    with Config.Replicas: node N's replica's redis-server
//	base+400+N    with Config.Replicas: the front of the replica's replication link
//	base+500      with monitoring: Prometheus (monitoringPortOffset)
//	base+500+N    with monitoring: node N's redis_exporter
//	base+600+M    etcd member M's client front (etcdClientFrontOffset …)
//	base+700+M    member M's peer front
//	base+800+M    member M's etcd, clients
//	base+900+M    member M's etcd, peers
//	base+1000+M   member M's supervisor's control endpoint
//
// PortOffsets, MonitoringPortOffsets and EtcdPortOffsets give the ranges
// to code. The root module infra/envs/local computes the same node ports
// from base_port (main.tf); the lab's tests check the two agree.
const (
	redisPortOffset   = 100
	controlPortOffset = 200
	replicaPortOffset = 300
	replicaLinkOffset = 400
)

// etcd members (Config.Etcd, `redlab lab up --etcd 3`): the consensus-based
// alternative to Redlock, next to the Redis nodes. Each member is one etcd
// process with the configuration infra/modules/etcd-member renders (fsync
// on), run by its own supervisor (`redlab node etcd-run`, package node)
// like a Redis node, behind two fault fronts: one on its client port, one on
// its peer port. The member advertises the fronts, so clients and the other
// members reach it only through them.
//
// Ports: see the table above. Its files: package node, etcdmember.go.
const (
	etcdClientFrontOffset = 600
	etcdPeerFrontOffset   = 700
	etcdClientOffset      = 800
	etcdPeerOffset        = 900
	etcdControlOffset     = 1000
)

// etcdPortOffsets are the offsets of the port ranges of etcd members.
var etcdPortOffsets = []int{etcdClientFrontOffset, etcdPeerFrontOffset, etcdClientOffset, etcdPeerOffset, etcdControlOffset}

// EtcdPortOffsets are the offsets from the base port of the etcd members'
// port ranges (each holds one port per member, from 1).
func EtcdPortOffsets() []int { return append([]int(nil), etcdPortOffsets...) }

// machineAddresses are the loopback addresses of the machine behind proxy
// port port and of its NTP server: 127.80.x.y and 127.81.x.y with x.y the
// port's two bytes, as infra/envs/local renders them.
func machineAddresses(port int) (addr, ntp string) {
	return fmt.Sprintf("127.80.%d.%d", port>>8, port&0xff), fmt.Sprintf("127.81.%d.%d", port>>8, port&0xff)
}

// With SSH (Config.SSH) the machine behind proxy port port runs in a
// network namespace of its own, machineNetns(port) = redlab-PORT, which is
// also the name of the host's end of its veth pair (package node,
// machinenet.go). The pair is 10.x.y.0/30, x.y the port's two bytes again:
// 10.x.y.2 is the machine's end (redis-server and sshd bind it), 10.x.y.1
// the host's (its supervisor serves NTP there; every client of the machine
// comes from it). Nothing routes beyond: the namespace has no default
// route, and the host neither forwards nor translates for it. A /30 of
// 10/8 that this host already holds on another interface fails Up (choose
// another base port).
func machineNetAddresses(port int) (addr, host string) {
	return fmt.Sprintf("10.%d.%d.2", port>>8, port&0xff), fmt.Sprintf("10.%d.%d.1", port>>8, port&0xff)
}

// machineNetns is the network namespace of the machine behind port.
func machineNetns(port int) string { return fmt.Sprintf("redlab-%d", port) }

// checkPorts fails, before anything is provisioned, when a port the lab
// needs is taken by something other than the node that has it now (a
// redis-server whose supervisor died still holds its own).
func checkPorts(cfg Config) error {
	names := map[int]string{0: "proxy", redisPortOffset: "redis-server", controlPortOffset: "control endpoint",
		replicaPortOffset: "replica redis-server", replicaLinkOffset: "replica link front"}
	for id := 1; id <= cfg.Nodes; id++ {
		own := map[int]bool{}
		for _, p := range node.Ports(cfg.StateDir, id) {
			own[p] = true
		}
		if cfg.SSH {
			if err := checkMachineNet(cfg.BasePort + id); err != nil {
				return fmt.Errorf("lab: node %d: %w", id, err)
			}
		} else if cfg.Machines {
			addr, _ := machineAddresses(cfg.BasePort + id)
			if port := cfg.BasePort + redisPortOffset + id; !own[port] {
				l, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(port)))
				if err != nil {
					return fmt.Errorf("lab: node %d's machine address %s:%d is in use (choose another --base-port): %w", id, addr, port, err)
				}
				l.Close()
			}
		}
		for _, off := range cfg.portOffsets() {
			port := cfg.BasePort + off + id
			if own[port] {
				continue
			}
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
			if err != nil {
				return fmt.Errorf("lab: node %d's %s port %d is in use (choose another --base-port): %w", id, names[off], port, err)
			}
			l.Close()
		}
	}
	for id := 1; id <= cfg.Etcd; id++ {
		own := map[int]bool{}
		for _, p := range node.EtcdMemberPorts(cfg.StateDir, id) {
			own[p] = true
		}
		for _, off := range etcdPortOffsets {
			port := cfg.BasePort + off + id
			if own[port] {
				continue
			}
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
			if err != nil {
				return fmt.Errorf("lab: etcd member %d's port %d (base+%d+%d) is in use (choose another --base-port): %w", id, port, off, id, err)
			}
			l.Close()
		}
	}
	return nil
}

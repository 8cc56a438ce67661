package lab

import "fmt"

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

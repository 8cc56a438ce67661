package lab

import "fmt"

// Port offsets from the lab's base port. Node N (from 1) listens on
// base+N (proxy, what clients use), base+redisPortOffset+N (redis-server,
// private) and base+controlPortOffset+N (control endpoint). A node with a
// replica (Config.Replicas) also has the replica's redis-server on
// base+replicaPortOffset+N and the front of its replication link on
// base+replicaLinkOffset+N.
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
// Ports: member M's client front is on BasePort+600+M, its peer front on
// BasePort+700+M, etcd itself on BasePort+800+M (clients) and
// BasePort+900+M (peers), the supervisor's control endpoint on
// BasePort+1000+M, all on 127.0.0.1. Its files: package node,
// etcdmember.go.
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

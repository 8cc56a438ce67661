package node

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// State is what a node is doing.
type State string

// Node states. A supervisor that is not running reports Down.
const (
	Starting State = "starting" // redis-server started, not answering yet
	Waiting  State = "waiting"  // restart guard is holding the restart delay
	Up       State = "up"
	Paused   State = "paused"  // SIGSTOP
	Stopped  State = "stopped" // clean stop on request; the supervisor is still there
	Down     State = "down"    // no supervisor
)

// Status is one node's state as its supervisor sees it.
type Status struct {
	DaemonStatus
	RedisPID    int         `json:"redis_pid,omitempty"`
	Port        int         `json:"port"`
	RedisPort   int         `json:"redis_port"`
	Persistence Persistence `json:"persistence"`
	// Replica describes the node's replica; nil without one.
	Replica *ReplicaStatus `json:"replica,omitempty"`
}

// ReplicaStatus is a replicated node's second redis-server and the
// topology of the pair. The node's front (Port) always leads to the pair's
// master; a failover swaps the roles.
type ReplicaStatus struct {
	Addr string `json:"addr"` // the replica process's redis-server
	Link string `json:"link"` // the front its replication link goes through
	// State is the replica process's: starting, up or down.
	State    State `json:"state"`
	PID      int   `json:"pid,omitempty"`
	Restarts int   `json:"restarts"`
	// Promoted: the replica process is the pair's master (after an odd
	// number of failovers) and the original process, when it runs,
	// follows it.
	Promoted bool `json:"promoted,omitempty"`
	// Synced: the process that follows reports its link to the master up.
	Synced bool `json:"synced"`
	// LinkCut: a failover's lag is holding replication back.
	LinkCut bool `json:"link_cut,omitempty"`
}

// Addr is the proxied address clients use.
func (s Status) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

func readJSONFile(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// LastStatus is what node id's status file in stateDir last said: the
// status of a node whose supervisor does not answer (zero without a file).
func LastStatus(stateDir string, id int) Status {
	var st Status
	_ = readJSONFile(filepath.Join(Dir(stateDir, id), statusFile), &st)
	return st
}

// LastEtcdStatus is LastStatus for etcd member id.
func LastEtcdStatus(stateDir string, id int) EtcdMemberStatus {
	var st EtcdMemberStatus
	_ = readJSONFile(filepath.Join(etcdDir(stateDir, id), etcdStatus), &st)
	return st
}

// Prepared returns the nodes and the etcd members whose directory in
// stateDir holds a spec (Prepare or PrepareEtcdMember wrote it), in no
// particular order.
func Prepared(stateDir string) (nodes, members []int) {
	ents, _ := os.ReadDir(stateDir)
	for _, e := range ents {
		if !e.IsDir() || !fileExists(filepath.Join(stateDir, e.Name(), specFile)) {
			continue
		}
		if id, ok := dirID(e.Name(), etcdDirPrefix); ok {
			members = append(members, id)
		} else if id, ok := dirID(e.Name(), nodeDirPrefix); ok {
			nodes = append(nodes, id)
		}
	}
	return nodes, members
}

// dirID parses the ID of a directory named prefix+ID.
func dirID(name, prefix string) (int, bool) {
	s, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0, false
	}
	id, err := strconv.Atoi(s)
	return id, err == nil
}

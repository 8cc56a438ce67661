package lab

import "github.com/redlocklab/redlocklab/infra/node"

// The node supervisor's types and values the lab's API takes and returns.
// Package node defines them, with the state directory's files and the
// control endpoint they travel through; these are the same types under the
// lab's names, so that a user of the lab needs no second import.
type (
	// NodeStatus is one node's state as its supervisor sees it.
	NodeStatus = node.Status
	// ReplicaStatus is a replicated node's second redis-server.
	ReplicaStatus = node.ReplicaStatus
	// EtcdMemberStatus is one etcd member's state as its supervisor sees it.
	EtcdMemberStatus = node.EtcdMemberStatus
	// FaultResult is what a node reports after a fault request.
	FaultResult = node.FaultResult
	// EtcdFaultResult is what an etcd member reports after a fault request.
	EtcdFaultResult = node.EtcdFaultResult
	// Fault is one injected fault with its start and end time.
	Fault = node.Fault
	// FaultKind names a fault.
	FaultKind = node.FaultKind
	// Duration is a time.Duration that reads and writes JSON as "1.5s".
	Duration = node.Duration
	// Persistence is a node's persistence profile.
	Persistence = node.Persistence
	// Credentials are a lab's ACL users.
	Credentials = node.Credentials
	// User is one ACL user and its password.
	User = node.User
)

// The persistence profiles and the limits of the lab's API.
const (
	PersistAlways   = node.PersistAlways
	PersistEverysec = node.PersistEverysec
	PersistNone     = node.PersistNone

	// MaxNodes is the largest node count the port layout allows.
	MaxNodes = node.MaxNodes
	// MaxEtcdMembers is the largest etcd cluster a lab runs.
	MaxEtcdMembers = node.MaxEtcdMembers
	// FaultsFile is the name, in the state directory, of the fault log.
	FaultsFile = node.FaultsFile
	// PersistNoFsync: AOF with appendfsync no (the power-loss negative control).
	PersistNoFsync = node.PersistNoFsync
	// PowerLossFilesystem names the power-loss model a PowerLossResult
	// records.
	PowerLossFilesystem = node.PowerLossFilesystem
)

// The errors of the lab's fault methods, as their supervisors report them.
var (
	ErrInvalid     = node.ErrInvalid
	ErrNotRunning  = node.ErrNotRunning
	ErrUnsupported = node.ErrUnsupported
)

package plan

// Source is one published rule a recommendation stands on. plan.md cites
// every value's sources by ID, and lists them at its end.
type Source struct {
	ID    string `json:"id"`
	Title string `json:"title"`
	URL   string `json:"url,omitempty"`
	// Rule is what the source says, in one line.
	Rule string `json:"rule"`
}

// The sources' IDs.
const (
	SrcEtcdDisk    = "etcd-disk"
	SrcEtcdTuning  = "etcd-tuning"
	SrcEtcdPerf    = "etcd-check-perf"
	SrcK8sLease    = "k8s-lease"
	SrcChubby      = "chubby"
	SrcSeedTimeout = "seed-timeout"
	SrcSeedRestart = "seed-restart"
	SrcRedlockSpec = "redlock-spec"
	SrcDoctor      = "doctor"
	SrcRedisNode   = "redis-node"
)

// Sources are the rules the planner cites, in the order plan.md lists them.
var Sources = []Source{
	{ID: SrcEtcdDisk, Title: "etcd, Hardware recommendations: Disks", URL: "https://etcd.io/docs/v3.5/op-guide/hardware/#disks",
		Rule: "the write-ahead log's fdatasync p99 must stay under 10 ms (checked with fio --fdatasync=1); a slower disk makes the cluster unstable"},
	{ID: SrcEtcdTuning, Title: "etcd, Tuning: time parameters", URL: "https://etcd.io/docs/v3.5/tuning/#time-parameters",
		Rule: "heartbeat interval 0.5 to 1.5 times the round trip between members; election timeout at least 10 times the round trip: a peer counts as gone only after ten round trips of silence"},
	{ID: SrcEtcdPerf, Title: "etcdctl check perf", URL: "https://github.com/etcd-io/etcd/tree/main/etcdctl#check-perf-options",
		Rule: "a load passes only when it reaches 90 % of the target throughput with no errors and its latency under the limit"},
	{ID: SrcK8sLease, Title: "Kubernetes client-go, leader election (LeaderElectionConfig)", URL: "https://pkg.go.dev/k8s.io/client-go/tools/leaderelection#LeaderElectionConfig",
		Rule: "LeaseDuration > RenewDeadline > JitterFactor (1.2) × RetryPeriod; the defaults are 15 s, 10 s and 2 s, a lease 1.5 times the time its holder has to act"},
	{ID: SrcChubby, Title: "Burrows, \"The Chubby lock service for loosely-coupled distributed systems\", OSDI 2006, §2.4",
		Rule: "a lock whose holder failed is not granted again before a lock-delay (up to a minute) has passed, so that its late requests find nobody to harm"},
	{ID: SrcSeedTimeout, Title: "the seed article, \"Redlock : verrous distribués sur plusieurs nœuds Redis\", §4.3",
		Rule: "each node's timeout is short, a few tens of milliseconds (50 ms in its Jedis pools): left at the 2 s default, a slow node eats almost the whole TTL"},
	{ID: SrcSeedRestart, Title: "the seed article, §8, common mistakes",
		Rule: "persistence with fsync=always, and a restarted node waits at least the longest TTL before it rejoins (antirez): a node that forgot its keys lets two clients reach a quorum"},
	{ID: SrcRedlockSpec, Title: "Distributed Locks with Redis (redis.io), the Redlock algorithm", URL: "https://redis.io/docs/latest/develop/use/patterns/distributed-locks/",
		Rule: "validity = TTL − elapsed − drift, drift = TTL × 0.01 + 2 ms; retry after a random delay to desynchronise contenders; N = 5 independent masters, quorum N/2+1"},
	{ID: SrcDoctor, Title: "redlab doctor (redlock.Client.Check)",
		Rule: "the per-node timeout at most a tenth of the TTL; a node's clock within 100 ms of the client's; appendfsync always or a delayed restart; maxmemory-policy noeviction; independent masters"},
	{ID: SrcRedisNode, Title: "infra/modules/redis-node (the node's systemd unit, restart guard and chrony.conf)",
		Rule: "the restart guard holds Redis back max_lock_ttl × (1 + clock_drift_ratio) + restart_margin after a crash or boot; chrony slews at most 500 ppm and steps only at boot"},
}

// source returns the source with id.
func source(id string) (Source, bool) {
	for _, s := range Sources {
		if s.ID == id {
			return s, true
		}
	}
	return Source{}, false
}

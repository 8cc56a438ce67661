// The rules: from the measured facts (Facts) to every recommended value,
// each with the rule it follows, the sources of that rule and the
// measurements it stands on. Pure functions of Facts, so that a table of
// measurements in and recommendations out tests them.

package plan

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Facts are the measurements the rules read: what Measure found, reduced
// to the numbers each rule needs. A zero field was not measured.
type Facts struct {
	// Rate is the target rate, reservations per second.
	Rate float64
	// SLOAcquireP99 is the SLO's bound on acquire.p99 (or p999, max), 0
	// when the SLO bounds no acquire latency.
	SLOAcquireP99 time.Duration
	// HoldTail is the longest hold of the critical section (the hold
	// distribution's maximum, or the histogram's), HoldP50 its median;
	// HoldFrom says where they come from.
	HoldTail, HoldP50 time.Duration
	HoldFrom          string
	// FixedNodes and FixedTTL are what the user fixed (0: free).
	FixedNodes int
	FixedTTL   time.Duration

	// Nodes is how many nodes were measured.
	Nodes int
	// RTTP99 is the slowest node's round-trip p99 (PING), RTTNode that
	// node's name.
	RTTP99  time.Duration
	RTTNode string
	// AcquireP99 and NodeP99 are, at the sweep's step at (or the first
	// above) the target rate, acquire p99 and the slowest node's SET p99;
	// AtRate is that step's rate.
	AcquireP99, NodeP99 time.Duration
	AtRate              float64
	// Appendfsync is the nodes' policy as the doctor read it ("" unknown,
	// "mixed" when they differ).
	Appendfsync string

	// DiskMeasured: a data disk was measured. DiskSyncsPerS is the slowest
	// disk's appends with O_DSYNC per second, in all, by one writer per
	// node on it (NodesPerDisk: 5 on a lab, 1 on hosts), DiskP99 its worst
	// p99 latency of one such append, DiskWhere names it.
	DiskMeasured  bool
	DiskSyncsPerS float64
	DiskP99       time.Duration
	NodesPerDisk  int
	DiskWhere     string

	// ClockChecked: the NTP discipline was read (chronyc). MaxSlewPPM is
	// the largest maxslewrate found (0: chrony's default applies, 83333
	// ppm), FreqPPM the largest |frequency error| + skew, StepsAfterBoot
	// a makestep that allows steps after the first updates, ClockWhy what
	// stopped the check. SharedClock: the nodes run on one host's clock.
	ClockChecked   bool
	SharedClock    bool
	MaxSlewPPM     float64
	FreqPPM        float64
	StepsAfterBoot bool
	ClockWhy       string
	// MaxOffset is the largest clock offset between a node and the client
	// (the doctor's TIME), MaxOffsetNode that node.
	MaxOffset     time.Duration
	MaxOffsetNode string

	// Knee is the sweep's highest rate that met the SLO (0: none),
	// KneeBounded true when a rate above it missed. Miss is the first
	// step above the knee that missed, if any.
	Knee        float64
	KneeBounded bool
	Miss        *StepFacts
	// Lowest is the sweep's first step (the least load), for the latency
	// floor.
	Lowest *StepFacts
}

// StepFacts are one sweep step's numbers the limit rule reads.
type StepFacts struct {
	Rate       float64
	AcquireP99 time.Duration
	// CPUBusy is the busiest host's CPU use during the step, 0..1 of all
	// its cores (0: not measured); CPUWhere names the host.
	CPUBusy  float64
	CPUWhere string
	// LateShare is the share of operations the load generator could not
	// send on time: this machine's CPU fell behind.
	LateShare float64
	Why       string
}

// Value is one recommended value with its rule and measurements.
type Value struct {
	// Name is the value's name: ttl, node_timeout, backoff, drift,
	// restart_delay, persistence, nodes, headroom_knee, headroom_disk.
	Name  string `json:"name"`
	Label string `json:"label"`
	// Value is the value as people read it ("14s"); Number the same in
	// Unit, for scripts.
	Value  string  `json:"value"`
	Number float64 `json:"number"`
	Unit   string  `json:"unit,omitempty"`
	// Rule is the rule applied, with the numbers put in; Sources the IDs
	// of the published rules it follows (Sources).
	Rule    string   `json:"rule"`
	Sources []string `json:"sources"`
	// Measured is what the rule read, with where it was measured.
	Measured string `json:"measured"`
	// Fixed: the user gave the value; the rule only checked it.
	Fixed bool `json:"fixed,omitempty"`
}

// Severity grades a Warning: a warning costs margin or availability, a
// critical one breaks the lock or the target.
type Severity string

// Severities.
const (
	Warn     Severity = "warning"
	Critical Severity = "critical"
)

// Warning is one thing the rules or the doctor found wrong.
type Warning struct {
	Severity Severity `json:"severity"`
	// From is "doctor" or the value's name whose rule raised it.
	From    string `json:"from"`
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
}

// NodeCount is what one node count tolerates.
type NodeCount struct {
	Nodes     int    `json:"nodes"`
	Quorum    int    `json:"quorum"`
	Tolerates int    `json:"tolerates"`
	Faults    string `json:"faults"`
	Chosen    bool   `json:"chosen,omitempty"`
}

// Limit is why the target is not met: the resource that ran out first.
type Limit struct {
	// Resource is disk, round trips, CPU or unknown.
	Resource string `json:"resource"`
	Why      string `json:"why"`
}

// The limiting resources.
const (
	ResDisk       = "disk"
	ResRoundTrips = "round trips"
	ResCPU        = "CPU"
	ResUnknown    = "unknown"
	// ResTTL is a fixed TTL that cannot hold the critical section: not a
	// resource, but a target the plan cannot meet either.
	ResTTL = "TTL"
)

// Recommendation is the plan's answer: every value, the node counts, the
// verdict on the target and the warnings.
type Recommendation struct {
	TTL           time.Duration `json:"-"`
	NodeTimeout   time.Duration `json:"-"`
	BackoffBase   time.Duration `json:"-"`
	BackoffCap    time.Duration `json:"-"`
	DriftFactor   float64       `json:"-"`
	DriftFixed    time.Duration `json:"-"`
	RestartDelay  time.Duration `json:"-"`
	RestartMargin time.Duration `json:"-"`
	// Persistence is the appendfsync policy: always or everysec.
	Persistence string `json:"-"`
	Nodes       int    `json:"-"`
	// KneeHeadroom is knee ÷ target; DiskHeadroom the disk's fsyncs per
	// second ÷ those the target needs (0: not known).
	KneeHeadroom float64 `json:"-"`
	DiskHeadroom float64 `json:"-"`

	Values     []Value     `json:"values"`
	NodeCounts []NodeCount `json:"node_counts"`
	// Meets: the nodes can serve the target under the SLO. Limit says why
	// not.
	Meets    bool      `json:"meets"`
	Limit    *Limit    `json:"limit,omitempty"`
	Warnings []Warning `json:"warnings"`
}

// Value returns the value named name.
func (r *Recommendation) Value(name string) (Value, bool) {
	for _, v := range r.Values {
		if v.Name == name {
			return v, true
		}
	}
	return Value{}, false
}

// The rules' constants.
const (
	// leaseRatio is the TTL over the time its holder has to act: the
	// Kubernetes defaults' LeaseDuration ÷ RenewDeadline (15 s ÷ 10 s).
	leaseRatio = 1.5
	// retryJitter is client-go's JitterFactor: RenewDeadline must exceed
	// it times RetryPeriod.
	retryJitter = 1.2
	// timeoutRTTs is etcd's election timeout in round trips: a node is
	// given up on after this many round trips of silence.
	timeoutRTTs = 10
	// timeoutSETs is how many times a normal SET p99 (at the target rate)
	// the node timeout allows, so that a node answering as usual is never
	// cut off.
	timeoutSETs = 2
	// minNodeTimeout is the least per-node timeout: "a few tens of
	// milliseconds" (the seed), below which a host's scheduling hiccup
	// counts a healthy node out.
	minNodeTimeout = 20 * time.Millisecond
	// maxTimeoutShare is the doctor's bound: a node timeout above TTL/10
	// lets one silent node eat the validity.
	maxTimeoutShare = 10
	// specDrift and specDriftFixed are the Redlock spec's drift.
	specDrift      = 0.01
	specDriftFixed = 2 * time.Millisecond
	// chronyDefaultSlewPPM is chrony's default maxslewrate.
	chronyDefaultSlewPPM = 83333.333
	// driftMargin is how many times the measured clock rate error the
	// drift factor covers.
	driftMargin = 2
	// restartMarginMin is restart_margin's least value (envs/aws's
	// default).
	restartMarginMin = 2 * time.Second
	// etcdFsyncP99 is etcd's bound on the disk's fsync p99.
	etcdFsyncP99 = 10 * time.Millisecond
	// fsyncsPerReservation: with appendfsync always each reservation is
	// two writes on every node (the SET and the compare-and-delete), at
	// most one fsync each (Redis folds the writes of one event-loop pass
	// into one fsync, so fewer under load).
	fsyncsPerReservation = 2
	// headroomWanted is the knee over the target below which the plan
	// warns (the knee moves with the host; etcd's check perf passes at
	// 90 % of its target, that is 1/0.9 ≈ 1.1 of headroom, and leaves no
	// room for a spike).
	headroomWanted = 1.5
	// diskHeadroomWanted is the disk's fsyncs over those needed below
	// which the plan prefers everysec with a delayed restart.
	diskHeadroomWanted = 2
	// cpuSaturated is a host's CPU use that counts as the limit: queueing
	// delays grow well before every core is busy, and one single-threaded
	// redis-server fills one core of a few.
	cpuSaturated = 0.7
	// lateLimit is the sweep's own bound on operations sent late.
	lateLimit = 0.01
	// backoffCapMax is the library's DefaultBackoff cap.
	backoffCapMax = 400 * time.Millisecond
	backoffMin    = 10 * time.Millisecond
)

// Recommend applies every rule to f.
func Recommend(f Facts) Recommendation {
	r := Recommendation{}
	r.Persistence = persistenceRule(f, &r)
	r.NodeTimeout = nodeTimeoutRule(f, &r)
	r.DriftFactor, r.DriftFixed = driftRule(f, &r)
	r.TTL = ttlRule(f, &r)
	r.BackoffBase, r.BackoffCap = backoffRule(f, &r)
	r.RestartDelay, r.RestartMargin = restartRule(f, &r)
	r.Nodes = nodesRule(f, &r)
	r.KneeHeadroom = kneeRule(f, &r)
	r.DiskHeadroom = diskRule(f, &r)
	r.Meets, r.Limit = limitRule(f, &r)
	clockWarnings(f, &r)
	return r
}

func (r *Recommendation) add(v Value) { r.Values = append(r.Values, v) }

func (r *Recommendation) warn(sev Severity, from, msg, fix string) {
	r.Warnings = append(r.Warnings, Warning{Severity: sev, From: from, Message: msg, Fix: fix})
}

// ttlRule: the TTL is the lease, the critical section plus the acquire the
// time its holder must act in, and the validity (TTL − acquire − drift)
// must cover the longest hold leaseRatio times: TTL ≥ (1.5 × hold tail +
// acquire p99 + drift fixed) ÷ (1 − drift factor), and ≥ 10 × the node
// timeout.
func ttlRule(f Facts, r *Recommendation) time.Duration {
	acq, acqFrom := f.AcquireP99, fmt.Sprintf("acquire p99 %s at %s/s", ms(f.AcquireP99), rate(f.AtRate))
	if acq == 0 {
		acq, acqFrom = f.SLOAcquireP99, fmt.Sprintf("the SLO's acquire bound %s (not measured at the target rate)", ms(f.SLOAcquireP99))
	}
	need := time.Duration((leaseRatio*float64(f.HoldTail) + float64(acq) + float64(r.DriftFixed)) / (1 - r.DriftFactor))
	floor := maxTimeoutShare * r.NodeTimeout
	ttl := roundTTL(max(need, floor))
	v := Value{Name: "ttl", Label: "lock TTL", Unit: "s",
		Rule: fmt.Sprintf("TTL ≥ (%.1f × hold tail + acquire p99 + %v) ÷ (1 − %g) = %s, and ≥ %d × the node timeout = %s: the validity a holder gets (TTL − acquire − drift) is then %.1f times its longest hold",
			leaseRatio, r.DriftFixed, r.DriftFactor, dur(need), maxTimeoutShare, dur(floor), leaseRatio),
		Sources:  []string{SrcK8sLease, SrcRedlockSpec, SrcDoctor},
		Measured: fmt.Sprintf("hold tail %s (%s); %s", dur(f.HoldTail), f.HoldFrom, acqFrom),
	}
	if f.FixedTTL > 0 {
		ttl, v.Fixed = f.FixedTTL, true
		validity := validityOf(ttl, acq, r.DriftFactor, r.DriftFixed)
		switch {
		case validity < f.HoldTail:
			r.warn(Critical, "ttl", fmt.Sprintf("the fixed TTL %s leaves a validity of %s, shorter than the longest hold %s: a holder outlives its lock and a waiter takes it (double grant)", dur(ttl), dur(validity), dur(f.HoldTail)),
				fmt.Sprintf("Use a TTL of at least %s, or shorten the critical section, or fence the writes.", dur(roundTTL(need))))
		case r.NodeTimeout > ttl/maxTimeoutShare:
			r.warn(Warn, "ttl", fmt.Sprintf("the per-node timeout %s is more than a tenth of the fixed TTL %s: one silent node needed for the quorum eats the validity", dur(r.NodeTimeout), dur(ttl)),
				fmt.Sprintf("Use a TTL of at least %s.", dur(floor)))
		case ttl < need:
			r.warn(Warn, "ttl", fmt.Sprintf("the fixed TTL %s covers the longest hold %s with less than the %.1f× margin (needs %s)", dur(ttl), dur(f.HoldTail), leaseRatio, dur(roundTTL(need))),
				"Raise the TTL: a slower hold than any measured would outlive its lock.")
		}
	}
	v.Value, v.Number = dur(ttl), ttl.Seconds()
	r.add(v)
	return ttl
}

// validityOf is what a lock granted after acq is valid for.
func validityOf(ttl, acq time.Duration, factor float64, fixed time.Duration) time.Duration {
	return ttl - acq - time.Duration(float64(ttl)*factor) - fixed
}

// nodeTimeoutRule: long enough that a node answering as usual is never cut
// off (10 round trips, as etcd's election timeout; twice the slowest node's
// SET p99 at the target rate), never under a few tens of milliseconds, then
// held to a tenth of the TTL by ttlRule.
func nodeTimeoutRule(f Facts, r *Recommendation) time.Duration {
	byRTT := timeoutRTTs * f.RTTP99
	bySET := timeoutSETs * f.NodeP99
	t := roundUp(max(byRTT, bySET, minNodeTimeout), 5*time.Millisecond)
	measured := []string{fmt.Sprintf("round-trip p99 %s (%s)", ms(f.RTTP99), orUnknown(f.RTTNode))}
	if f.NodeP99 > 0 {
		measured = append(measured, fmt.Sprintf("slowest node's SET p99 %s at %s/s", ms(f.NodeP99), rate(f.AtRate)))
	}
	r.add(Value{Name: "node_timeout", Label: "per-node timeout", Value: dur(t), Number: float64(t) / 1e6, Unit: "ms",
		Rule: fmt.Sprintf("max(%d × round-trip p99 = %s, %d × SET p99 = %s, %s), rounded up to 5 ms; at most a tenth of the TTL",
			timeoutRTTs, ms(byRTT), timeoutSETs, ms(bySET), dur(minNodeTimeout)),
		Sources:  []string{SrcEtcdTuning, SrcSeedTimeout, SrcDoctor},
		Measured: strings.Join(measured, "; "),
	})
	if f.RTTP99 == 0 {
		r.warn(Warn, "node_timeout", "the round trips to the nodes were not measured: the timeout is the least one", "")
	}
	return t
}

// backoffRule: retries start after at least one normal acquire (a
// contender's attempt is over by then: the spec's random delay that
// desynchronises clients) and, as they double, stop growing at the
// library's cap or at half the median hold (a waiter retries at least
// twice per typical critical section); jittered, the cap still fits 1.2
// times in the validity (client-go: RenewDeadline > 1.2 × RetryPeriod).
func backoffRule(f Facts, r *Recommendation) (base, capped time.Duration) {
	acq := f.AcquireP99
	if acq == 0 {
		acq = f.SLOAcquireP99
	}
	base = roundUp(max(backoffMin, acq), time.Millisecond)
	capped = backoffCapMax
	if f.HoldP50 > 0 && f.HoldP50/2 < capped {
		capped = f.HoldP50 / 2
	}
	capped = roundUp(max(capped, base), time.Millisecond)
	validity := validityOf(r.TTL, acq, r.DriftFactor, r.DriftFixed)
	r.add(Value{Name: "backoff", Label: "retry backoff", Value: fmt.Sprintf("exponential %s to %s, jittered", dur(base), dur(capped)), Number: float64(capped) / 1e6, Unit: "ms",
		Rule: fmt.Sprintf("base = max(%s, acquire p99) = %s; cap = min(%s, hold p50 ÷ 2) = %s; %.1f × cap = %s < validity %s; Acquire retries until its context ends",
			dur(backoffMin), dur(base), dur(backoffCapMax), dur(capped), retryJitter, dur(time.Duration(retryJitter*float64(capped))), dur(validity)),
		Sources:  []string{SrcRedlockSpec, SrcK8sLease},
		Measured: fmt.Sprintf("acquire p99 %s; hold p50 %s (%s)", ms(acq), dur(f.HoldP50), f.HoldFrom),
	})
	if time.Duration(retryJitter*float64(capped)) >= validity {
		r.warn(Warn, "backoff", fmt.Sprintf("a retry of %s (with jitter) does not fit in the validity %s", dur(capped), dur(validity)), "Raise the TTL.")
	}
	return base, capped
}

// driftRule: the drift factor covers, twice over, how fast a node's clock
// may run against the client's: chrony's maxslewrate plus its frequency
// error, never less than the spec's 1 %.
func driftRule(f Facts, r *Recommendation) (float64, time.Duration) {
	factor := specDrift
	var measured string
	switch {
	case f.SharedClock:
		measured = "the nodes share one host's clock: no rate between them"
	case !f.ClockChecked:
		measured = "NTP discipline not read (" + orUnknown(f.ClockWhy) + ")"
	default:
		slew := f.MaxSlewPPM
		if slew == 0 {
			slew = chronyDefaultSlewPPM
		}
		need := driftMargin * (slew + f.FreqPPM) / 1e6
		factor = max(factor, roundUpFloat(need, 0.001))
		measured = fmt.Sprintf("chrony maxslewrate %s ppm, frequency error + skew %.1f ppm", trimFloat(slew), f.FreqPPM)
		if f.MaxSlewPPM == 0 {
			measured += " (no maxslewrate: chrony's default)"
		}
	}
	r.add(Value{Name: "drift", Label: "drift factor", Value: fmt.Sprintf("%g + %v", factor, specDriftFixed), Number: factor,
		Rule:    fmt.Sprintf("factor = max(%g, %d × (max slew + frequency error) ÷ 10⁶) = %g; fixed part %v", specDrift, driftMargin, factor, specDriftFixed),
		Sources: []string{SrcRedlockSpec, SrcRedisNode}, Measured: measured,
	})
	return factor, specDriftFixed
}

// restartRule: a crashed node rejoins only after every lock it may have
// granted has expired: TTL × (1 + drift) + margin, which is what the node's
// unit enforces with max_lock_ttl and restart_margin.
func restartRule(f Facts, r *Recommendation) (delay, margin time.Duration) {
	margin = restartMarginMin
	if off := f.MaxOffset.Abs() + time.Second; off > margin {
		margin = roundUp(off, time.Second)
	}
	maxTTL := roundUp(r.TTL, time.Second)
	delay = roundUp(time.Duration(float64(maxTTL)*(1+r.DriftFactor))+margin, time.Second)
	r.add(Value{Name: "restart_delay", Label: "restart delay", Value: dur(delay), Number: delay.Seconds(), Unit: "s",
		Rule: fmt.Sprintf("≥ the longest TTL: max_lock_ttl %s × (1 + %g) + restart_margin %s; the unit's restart guard (redlock-redis.service, ExecStartPre pre-start) waits it after every crash and boot",
			dur(maxTTL), r.DriftFactor, dur(margin)),
		Sources:  []string{SrcSeedRestart, SrcChubby, SrcRedisNode},
		Measured: fmt.Sprintf("TTL %s; largest clock offset %s (%s), in the margin", dur(r.TTL), ms(f.MaxOffset.Abs()), orUnknown(f.MaxOffsetNode)),
	})
	return delay, margin
}

// persistenceRule: appendfsync always when the disk takes the target's
// fsyncs with room to spare, everysec otherwise; the restart delay is kept
// either way (a power cut under everysec loses up to a second of locks).
func persistenceRule(f Facts, r *Recommendation) string {
	need := f.neededFsyncs()
	p, measured := "always", "the data disk was not measured"
	switch {
	case f.DiskMeasured && f.DiskSyncsPerS < diskHeadroomWanted*need:
		p = "everysec"
		measured = fmt.Sprintf("%s: %.0f fsyncs/s, the target needs %.0f/s", f.DiskWhere, f.DiskSyncsPerS, need)
	case f.DiskMeasured:
		measured = fmt.Sprintf("%s: %.0f fsyncs/s, the target needs %.0f/s", f.DiskWhere, f.DiskSyncsPerS, need)
	}
	r.add(Value{Name: "persistence", Label: "appendfsync", Value: p,
		Rule: fmt.Sprintf("always when the disk does at least %d × the fsyncs the target needs (%d per reservation on each node%s), else everysec; with the restart delay either way",
			diskHeadroomWanted, fsyncsPerReservation, sharedNote(f)),
		Sources:  []string{SrcSeedRestart, SrcDoctor},
		Measured: measured,
	})
	if p == "everysec" {
		r.warn(Warn, "persistence", "the disk cannot take appendfsync always at the target rate: everysec loses up to a second of locks at a power cut, so the restart delay is what keeps the lock", "Give the nodes faster disks (more IOPS) to run appendfsync always.")
	}
	if f.Appendfsync != "" && f.Appendfsync != p {
		r.warn(Warn, "persistence", fmt.Sprintf("the nodes run appendfsync %s; the plan says %s", f.Appendfsync, p), "Set appendfsync "+p+" in redis.conf (infra/modules/redis-node's fsync variable).")
	}
	return p
}

func writers(n int) string {
	if n <= 1 {
		return "one writer"
	}
	return fmt.Sprintf("%d writers at once, one per node", n)
}

func sharedNote(f Facts) string {
	if f.NodesPerDisk > 1 {
		return fmt.Sprintf(", %d nodes sharing the disk", f.NodesPerDisk)
	}
	return ""
}

// neededFsyncs is what the target asks of the busiest disk under
// appendfsync always.
func (f Facts) neededFsyncs() float64 {
	return fsyncsPerReservation * f.Rate * float64(max(f.NodesPerDisk, 1))
}

// nodesRule: five independent nodes (the spec's N), unless fixed; the
// table shows what 3, 5 and 7 tolerate.
func nodesRule(f Facts, r *Recommendation) int {
	n, why := 5, "five survive a node in maintenance (or in its restart delay) and a crash at once"
	if f.FixedNodes > 0 {
		n, why = f.FixedNodes, "fixed"
	}
	for _, c := range []int{3, 5, 7} {
		q := c/2 + 1
		r.NodeCounts = append(r.NodeCounts, NodeCount{Nodes: c, Quorum: q, Tolerates: c - q, Faults: toleratedFaults(c - q), Chosen: c == n})
	}
	r.add(Value{Name: "nodes", Label: "nodes", Value: fmt.Sprint(n), Number: float64(n),
		Rule:    fmt.Sprintf("odd, independent masters, quorum N/2+1; %s", why),
		Sources: []string{SrcRedlockSpec, SrcDoctor}, Fixed: f.FixedNodes > 0,
		Measured: fmt.Sprintf("%d nodes measured", f.Nodes),
	})
	switch {
	case n%2 == 0:
		r.warn(Warn, "nodes", fmt.Sprintf("%d nodes tolerate no more failures than %d", n, n-1), fmt.Sprintf("Use %d or %d nodes.", n-1, n+1))
	case n < 5:
		r.warn(Warn, "nodes", fmt.Sprintf("%d nodes tolerate %d down: a node in its restart delay uses up the tolerance", n, n-(n/2+1)), "Use 5 nodes.")
	}
	if f.Nodes > 0 && f.Nodes != n {
		r.warn(Warn, "nodes", fmt.Sprintf("the plan's %d nodes are not the %d measured: the knee and the latencies are those of %d", n, f.Nodes, f.Nodes), "")
	}
	return n
}

func toleratedFaults(t int) string {
	switch t {
	case 0:
		return "none"
	case 1:
		return "one node down (a crash, or one in maintenance or its restart delay), not both"
	case 2:
		return "two down: one in maintenance or its restart delay and one crash"
	default:
		return fmt.Sprintf("%d down: maintenance, a restart delay and crashes, or a partitioned availability zone", t)
	}
}

// kneeRule: the headroom is the knee over the target.
func kneeRule(f Facts, r *Recommendation) float64 {
	h := 0.0
	if f.Knee > 0 && f.Rate > 0 {
		h = f.Knee / f.Rate
	}
	knee := rate(f.Knee) + "/s"
	if !f.KneeBounded && f.Knee > 0 {
		knee = "at least " + knee + " (every step met the SLO)"
	}
	if f.Knee == 0 {
		knee = "none (no step met the SLO)"
	}
	r.add(Value{Name: "headroom_knee", Label: "headroom (knee)", Value: fmt.Sprintf("%.2f×", h), Number: h,
		Rule:     fmt.Sprintf("knee ÷ target; a step meets the SLO only with at least 99 %% reserved and at most 1 %% sent late; warn under %.1f×", headroomWanted),
		Sources:  []string{SrcEtcdPerf},
		Measured: fmt.Sprintf("knee %s, target %s/s", knee, rate(f.Rate)),
	})
	if h >= 1 && h < headroomWanted {
		r.warn(Warn, "headroom_knee", fmt.Sprintf("the knee %s/s is only %.2f× the target: a spike or a slower host passes it", rate(f.Knee), h), "Plan for more nodes' CPU or a lower rate per node set.")
	}
	if f.Knee > 0 && !f.KneeBounded {
		r.warn(Warn, "headroom_knee", "every step of the sweep met the SLO: the knee is a lower bound", "Sweep further (a higher --max-rate).")
	}
	return h
}

// diskRule: the disk's fsyncs per second over those the target needs under
// appendfsync always; its p99 against etcd's 10 ms.
func diskRule(f Facts, r *Recommendation) float64 {
	if !f.DiskMeasured {
		r.add(Value{Name: "headroom_disk", Label: "headroom (disk)", Value: "not measured", Rule: "the disk's fsyncs/s ÷ the target's", Sources: []string{SrcEtcdDisk},
			Measured: "no data disk reachable (give --hosts or run on a lab)"})
		r.warn(Warn, "headroom_disk", "the data disks were not measured: whether they take appendfsync always at the target rate is unknown", "Give --hosts (SSH) so that the plan measures each data disk.")
		return 0
	}
	need := f.neededFsyncs()
	h := f.DiskSyncsPerS / need
	r.add(Value{Name: "headroom_disk", Label: "headroom (disk)", Value: fmt.Sprintf("%.1f×", h), Number: h,
		Rule:     fmt.Sprintf("the disk's fsyncs/s ÷ (%d × target%s) = %.0f ÷ %.0f; its fsync p99 under %v", fsyncsPerReservation, sharedNote(f), f.DiskSyncsPerS, need, etcdFsyncP99),
		Sources:  []string{SrcEtcdDisk},
		Measured: fmt.Sprintf("%s: %.0f appends with O_DSYNC per second by %s, p99 %s", f.DiskWhere, f.DiskSyncsPerS, writers(f.NodesPerDisk), ms(f.DiskP99)),
	})
	if f.DiskP99 > etcdFsyncP99 {
		r.warn(Warn, "headroom_disk", fmt.Sprintf("the data disk's fsync p99 is %s, over etcd's %v bound", ms(f.DiskP99), etcdFsyncP99), "Use a disk with a lower sync latency (SSD, provisioned IOPS).")
	}
	return h
}

// limitRule: the target is met when a step at or above it met the SLO and
// the disk takes it; otherwise the resource that ran out: the disk when
// the fsyncs needed at the first missed rate reach its rate, round trips
// when even the least load's latency is over the SLO, CPU when a host was
// saturated.
func limitRule(f Facts, r *Recommendation) (bool, *Limit) {
	for _, w := range r.Warnings {
		if w.Severity == Critical && w.From == "ttl" {
			return false, &Limit{Resource: ResTTL, Why: w.Message}
		}
	}
	kneeOK := f.Knee >= f.Rate && f.Knee > 0
	diskOK := !f.DiskMeasured || r.Persistence != "always" || f.DiskSyncsPerS >= f.neededFsyncs()
	if kneeOK && diskOK {
		return true, nil
	}
	if !diskOK {
		return false, &Limit{Resource: ResDisk, Why: fmt.Sprintf("appendfsync always at %s/s needs %.0f fsyncs/s from %s, which does %.0f/s", rate(f.Rate), f.neededFsyncs(), f.DiskWhere, f.DiskSyncsPerS)}
	}
	knee := fmt.Sprintf("the knee is %s/s", rate(f.Knee))
	if f.Knee == 0 {
		knee = "no step met the SLO"
	}
	// The least load already missed the SLO: the latency floor (round
	// trips, and the disk's sync under always) if it comes near the SLO.
	if lo := f.Lowest; lo != nil && f.SLOAcquireP99 > 0 && (f.Knee == 0 || lo.AcquireP99 >= f.SLOAcquireP99) {
		always := f.Appendfsync == "always" || (f.Appendfsync == "" && r.Persistence == "always")
		floor := f.RTTP99
		if always && f.DiskMeasured {
			floor += f.DiskP99
		}
		at := fmt.Sprintf("%s: at %s/s, the least load, acquire p99 was %s against the SLO's %s", knee, rate(lo.Rate), ms(lo.AcquireP99), ms(f.SLOAcquireP99))
		switch {
		case 2*floor >= f.SLOAcquireP99 && always && f.DiskMeasured && f.DiskP99 >= f.RTTP99:
			return false, &Limit{Resource: ResDisk, Why: fmt.Sprintf("%s, and the disk's fsync p99 alone is %s", at, ms(f.DiskP99))}
		case 2*floor >= f.SLOAcquireP99:
			return false, &Limit{Resource: ResRoundTrips, Why: fmt.Sprintf("%s, and the slowest node's round-trip p99 is %s (%s)", at, ms(f.RTTP99), f.RTTNode)}
		}
		if l := cpuLimit(at, lo); l != nil {
			return false, l
		}
		return false, &Limit{Resource: ResUnknown, Why: fmt.Sprintf("%s while the round trips (p99 %s) and the disk leave room and no CPU was saturated (busiest %.0f %%): the host stalled; see the step's report", at, ms(floor), lo.CPUBusy*100)}
	}
	if m := f.Miss; m != nil {
		// A saturated CPU first: the fsyncs counted below are an upper
		// bound (Redis folds the writes of one event-loop pass into one).
		at := fmt.Sprintf("%s; at %s/s, where it missed (%s)", knee, rate(m.Rate), m.Why)
		if l := cpuLimit(at, m); l != nil {
			return false, l
		}
		always := f.Appendfsync == "always" || (f.Appendfsync == "" && r.Persistence == "always")
		if f.DiskMeasured && always {
			need := fsyncsPerReservation * m.Rate * float64(max(f.NodesPerDisk, 1))
			if need >= 0.8*f.DiskSyncsPerS {
				return false, &Limit{Resource: ResDisk, Why: fmt.Sprintf("%s; at %s/s, where it missed, appendfsync always needs up to %.0f fsyncs/s of %s, which does %.0f/s", knee, rate(m.Rate), need, f.DiskWhere, f.DiskSyncsPerS)}
			}
		}
		return false, &Limit{Resource: ResUnknown, Why: fmt.Sprintf("%s, no disk, round-trip or CPU limit was in sight (busiest CPU %.0f %%): see the step's report", at, m.CPUBusy*100)}
	}
	return false, &Limit{Resource: ResUnknown, Why: knee + ", and no step above it ran"}
}

// cpuLimit is the CPU limit of a missed step: a saturated host, or the
// load generator falling behind its schedule (this machine's CPU).
func cpuLimit(at string, s *StepFacts) *Limit {
	switch {
	case s.CPUBusy >= cpuSaturated:
		return &Limit{Resource: ResCPU, Why: fmt.Sprintf("%s, %s's CPU was %.0f %% busy", at, s.CPUWhere, s.CPUBusy*100)}
	case s.LateShare > lateLimit:
		return &Limit{Resource: ResCPU, Why: fmt.Sprintf("%s, the load generator could not send %.1f %% of its operations on time: this machine's CPU (%.0f %% busy) fell behind", at, s.LateShare*100, s.CPUBusy*100)}
	}
	return nil
}

// clockWarnings: what the NTP discipline and the offsets say.
func clockWarnings(f Facts, r *Recommendation) {
	if f.SharedClock {
		return // one clock: no rate or step between the nodes
	}
	if f.ClockChecked {
		if f.MaxSlewPPM == 0 {
			r.warn(Warn, "drift", "chrony runs with its default maxslewrate (83333 ppm): a slewing clock runs up to 8 % fast, far past the 1 % drift the client allows", "Set maxslewrate 500 in chrony.conf, as infra/modules/redis-node does.")
		}
		if f.StepsAfterBoot {
			r.warn(Critical, "drift", "chrony may step the clock after boot (makestep without a limit): a step moves every lock's expiry at once", "Allow steps only at the first updates (makestep 1 1) and start Redis after chronyc waitsync, as infra/modules/redis-node does.")
		}
	} else {
		r.warn(Warn, "drift", "the nodes' NTP discipline was not read ("+orUnknown(f.ClockWhy)+")", "Give --hosts so that the plan reads chronyc tracking on every node.")
	}
}

// roundTTL rounds a TTL up: to 10 ms under a second, 100 ms under 10 s,
// whole seconds above.
func roundTTL(d time.Duration) time.Duration {
	switch {
	case d < time.Second:
		return roundUp(d, 10*time.Millisecond)
	case d < 10*time.Second:
		return roundUp(d, 100*time.Millisecond)
	}
	return roundUp(d, time.Second)
}

func roundUp(d, step time.Duration) time.Duration {
	if d <= 0 {
		return step
	}
	return (d + step - 1) / step * step
}

func roundUpFloat(x, step float64) float64 { return math.Ceil(x/step-1e-9) * step }

// dur is a duration as people read it: 14s, 1.5s, 35ms.
func dur(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(100 * time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}

// ms is a measured latency in milliseconds, two decimals.
func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }

func rate(r float64) string { return trimFloat(r) }

func trimFloat(x float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.1f", x), "0"), ".")
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// What the plan deploys: the library's options as Go, and the
// terraform.tfvars of infra/envs/aws.

package plan

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// goOptions is the recommendation as redlock options: a function that
// builds the Client and the TTL to lock with. It compiles as it is
// against package redlock (a test builds it).
func goOptions(r Recommendation) string {
	var b strings.Builder
	fmt.Fprintf(&b, `// newLockClient builds the planned Redlock client over the %d nodes at
// addrs (host:port), logged in as user.
func newLockClient(addrs []string, user, password string) (*redlock.Client, error) {
	nodes := redlock.NewNodes(addrs,
		redlock.WithNodeTimeout(%s),
		redlock.WithAuth(user, password),
	)
	return redlock.New(nodes,
		redlock.WithBackoff(redlock.ExponentialBackoff(%s, %s)),
		redlock.WithDrift(%s, %s),
	)
}

// lockTTL is the planned TTL: pass it to Acquire, TryAcquire and Do, and
// bound each Acquire by the caller's own deadline (its context).
const lockTTL = %s
`, r.Nodes, goDur(r.NodeTimeout), goDur(r.BackoffBase), goDur(r.BackoffCap), strconv.FormatFloat(r.DriftFactor, 'f', -1, 64), goDur(r.DriftFixed), goDur(r.TTL))
	return b.String()
}

// goDur is d as a Go expression: 14 * time.Second, 25 * time.Millisecond.
func goDur(d time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{time.Hour, "time.Hour"}, {time.Minute, "time.Minute"}, {time.Second, "time.Second"}, {time.Millisecond, "time.Millisecond"}, {time.Microsecond, "time.Microsecond"}} {
		if d >= u.d && d%u.d == 0 {
			if d == u.d {
				return u.name
			}
			return fmt.Sprintf("%d * %s", d/u.d, u.name)
		}
	}
	return fmt.Sprintf("%d * time.Nanosecond", d)
}

// TFVar is one entry of terraform.tfvars: a variable infra/envs/aws
// declares, its value as HCL, and why.
type TFVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	Why   string `json:"why"`
}

// gp3 volumes give 3000 IOPS without extra cost and at most 16000;
// io2 up to 64000 (infra/modules/aws's data_volume checks the same).
const (
	gp3BaseIOPS = 3000
	gp3MaxIOPS  = 16000
	io2MaxIOPS  = 64000
	// iopsPerGiB is the most IOPS EBS provisions per GiB of a gp3 or io2
	// volume.
	iopsPerGiB = 500
)

// tfvars are the values of infra/envs/aws the plan sets: the TTL and the
// restart margin the nodes' restart guard waits out, and the data volume
// when the target's fsyncs need more IOPS than a gp3's baseline.
func tfvars(r Recommendation, f Facts) []TFVar {
	ttl := int(math.Ceil(r.TTL.Seconds()))
	out := []TFVar{
		{Name: "max_lock_ttl", Value: strconv.Itoa(ttl),
			Why: fmt.Sprintf("the planned TTL %s, rounded up to the second: the nodes' restart guard waits it out after every crash and boot", dur(r.TTL))},
		{Name: "restart_margin", Value: strconv.Itoa(int(math.Ceil(r.RestartMargin.Seconds()))),
			Why: fmt.Sprintf("added to max_lock_ttl × (1 + clock_drift_ratio): a restart delay of %s", dur(r.RestartDelay))},
	}
	// Each node's AOF takes every reservation's fsyncs; twice that in IOPS
	// leaves the headroom the plan wants of a disk.
	iops := diskHeadroomWanted * fsyncsPerReservation * f.Rate
	if r.Persistence == "always" && iops > gp3BaseIOPS {
		typ, n := "gp3", roundUpInt(iops, 1000)
		if n > gp3MaxIOPS {
			typ = "io2"
		}
		n = min(n, io2MaxIOPS)
		size := max(10, roundUpInt(float64(n)/iopsPerGiB, 1))
		out = append(out, TFVar{Name: "data_volume", Value: fmt.Sprintf("{ size = %d, type = %q, iops = %d }", size, typ, n),
			Why: fmt.Sprintf("appendfsync always at %s/s is up to %.0f fsyncs/s on each node; twice that in IOPS, on at least %d GiB per %d IOPS (EBS's ratio)", rate(f.Rate), fsyncsPerReservation*f.Rate, 1, iopsPerGiB)})
	}
	return out
}

func roundUpInt(x float64, step int) int { return int(math.Ceil(x/float64(step))) * step }

// tfvarsText is terraform.tfvars: the plan's variables, each with why, and
// a note on what the user still has to give.
func tfvarsText(vars []TFVar, p *Plan) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# terraform.tfvars for infra/envs/aws, written by redlab plan (%s).\n", p.Created.Format(time.RFC3339))
	fmt.Fprintf(&b, "# Target: %s reservations/s, %s, holds up to %s (%s).\n", rate(p.Target.Rate), strings.Join(p.Target.SLO, " && "), dur(p.Target.Hold.Max), p.Target.Hold.From)
	b.WriteString("# Add region, vpc_id, subnet_ids and client_cidrs; the passwords come from TF_VAR_redlock_password\n# and TF_VAR_monitor_password.\n")
	if p.Site != "hosts" {
		fmt.Fprintf(&b, "# instance_type is not set: the plan measured a %s, not the instances it would run on.\n", p.Site)
	}
	for _, v := range vars {
		fmt.Fprintf(&b, "\n# %s\n%s = %s\n", v.Why, v.Name, v.Value)
	}
	return b.String()
}

package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Severity grades a Finding.
type Severity uint8

// Severities, least to most severe.
const (
	// Info: the check passed; the message states what was seen.
	Info Severity = iota
	// Warning: safe only under an extra condition (delayed restarts, working
	// NTP, …) or costs availability.
	Warning
	// Critical: the lock can be granted twice, or a node is unusable.
	Critical
)

// String returns "info", "warning" or "critical".
func (s Severity) String() string {
	switch s {
	case Info:
		return "info"
	case Warning:
		return "warning"
	case Critical:
		return "critical"
	}
	return "severity(" + strconv.Itoa(int(s)) + ")"
}

// Finding is one result of Check.
type Finding struct {
	// Node is the 0-based node index, or -1 for the node set as a whole.
	Node int
	// Check names what was audited: "reachable", "role", "replicas", "run_id",
	// "config", "appendonly", "appendfsync", "maxmemory-policy", "clock",
	// "client", "nodes", "timeouts".
	Check string
	// Severity grades the finding.
	Severity Severity
	// Message says what was found, in one line.
	Message string
	// Fix says what to do about it, in one line; empty for Info.
	Fix string
}

// NodeInfo is what Check read from one node. String fields are empty when
// they could not be read.
type NodeInfo struct {
	// Node is the 0-based node index; Addr its address.
	Node int
	Addr string
	// Reachable reports whether the node answered PING.
	Reachable bool
	// Err is why the node could not be reached.
	Err error
	// Version and RunID come from INFO server.
	Version string
	RunID   string
	// Role ("master", "slave") and Replicas (connected_slaves) come from
	// INFO replication.
	Role     string
	Replicas int
	// AppendOnly, AppendFsync and MaxmemoryPolicy come from CONFIG GET.
	AppendOnly      string
	AppendFsync     string
	MaxmemoryPolicy string
	// ClockOffset is the node's TIME minus the client's clock at the middle
	// of the round trip; RTT is that round trip.
	ClockOffset time.Duration
	RTT         time.Duration
}

// Report is the result of Check.
type Report struct {
	Nodes    []NodeInfo
	Findings []Finding
}

// Critical reports whether any finding is Critical.
func (r Report) Critical() bool {
	for _, f := range r.Findings {
		if f.Severity == Critical {
			return true
		}
	}
	return false
}

// CheckOption configures Check.
type CheckOption func(*checkConfig)

type checkConfig struct {
	ttl time.Duration
}

// DefaultCheckTTL is the lock TTL Check compares timeouts against unless
// WithTTL says otherwise.
const DefaultCheckTTL = 10 * time.Second

// clockWarning is the offset beyond which a node's clock suggests that time
// synchronisation is not working.
const clockWarning = 100 * time.Millisecond

// WithTTL sets the lock TTL in use, against which Check judges the client
// timeouts (default DefaultCheckTTL).
func WithTTL(ttl time.Duration) CheckOption {
	return func(c *checkConfig) {
		if ttl > 0 {
			c.ttl = ttl
		}
	}
}

// Check audits every node against the practices Redlock's safety rests on:
// appendonly yes with appendfsync always, maxmemory-policy noeviction, role
// master without replicas, distinct run_ids (really independent servers), a
// clock close to the client's (TIME), and client timeouts small against the
// TTL; it also flags an even or too small number of nodes. It uses read-only
// monitoring commands (PING, INFO, CONFIG GET, TIME); a node that denies
// CONFIG GET gets a Warning, a node that cannot be reached a Critical.
// The error is non-nil only when ctx ended.
func (c *Client) Check(ctx context.Context, opts ...CheckOption) (Report, error) {
	cfg := checkConfig{ttl: DefaultCheckTTL}
	for _, o := range opts {
		o(&cfg)
	}
	rep := Report{Nodes: make([]NodeInfo, len(c.nodes))}
	perNode := make([][]Finding, len(c.nodes))
	var wg sync.WaitGroup
	for i, node := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep.Nodes[i], perNode[i] = c.checkNode(ctx, i, node)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("redlock: check: %w", err)
	}

	rep.Findings = append(rep.Findings, c.checkSize(), c.checkTimeout(cfg.ttl))
	seen := map[string]int{}
	for i, fs := range perNode {
		rep.Findings = append(rep.Findings, fs...)
		id := rep.Nodes[i].RunID
		if id == "" {
			continue
		}
		if first, dup := seen[id]; dup {
			rep.Findings = append(rep.Findings, Finding{Node: i, Check: "run_id", Severity: Critical,
				Message: fmt.Sprintf("same run_id as node %d (%s): both addresses reach one server", first, c.addrs[first]),
				Fix:     "list every server once; Redlock needs N independent masters"})
		} else {
			seen[id] = i
			rep.Findings = append(rep.Findings, Finding{Node: i, Check: "run_id", Severity: Info,
				Message: "run_id " + shortID(id) + " is unique"})
		}
	}
	return rep, nil
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func (c *Client) checkSize() Finding {
	n := len(c.nodes)
	tolerates := n - c.quorum
	f := Finding{Node: -1, Check: "nodes",
		Message: fmt.Sprintf("%d nodes, quorum %d, tolerates %d down", n, c.quorum, tolerates)}
	switch {
	case n < 3:
		f.Severity, f.Fix = Warning, "use 3 or 5 independent nodes"
		f.Message += ": no fault tolerance"
	case n%2 == 0:
		f.Severity, f.Fix = Warning, fmt.Sprintf("use %d or %d nodes: an even count adds load, not tolerance", n-1, n+1)
		f.Message += fmt.Sprintf(", like %d nodes", n-1)
	}
	return f
}

func (c *Client) checkTimeout(ttl time.Duration) Finding {
	pct := float64(c.timeout) / float64(ttl) * 100
	f := Finding{Node: -1, Check: "timeouts",
		Message: fmt.Sprintf("request timeout %v is %.2g%% of ttl %v", c.timeout, pct, ttl)}
	if c.timeout > ttl/10 {
		f.Severity = Warning
		f.Message += ": a silent node needed for the quorum eats the validity"
		f.Fix = fmt.Sprintf("use a node timeout of at most %v (NewNodes WithNodeTimeout)", ttl/100)
	}
	return f
}

func (c *Client) checkNode(ctx context.Context, i int, node *redis.Client) (NodeInfo, []Finding) {
	info := NodeInfo{Node: i, Addr: c.addrs[i]}
	var fs []Finding
	add := func(check string, sev Severity, msg, fix string) {
		fs = append(fs, Finding{Node: i, Check: check, Severity: sev, Message: msg, Fix: fix})
	}
	ctx, cancel := context.WithTimeout(ctx, max(10*c.timeout, time.Second))
	defer cancel()

	// Any reply, even an ACL refusal (a monitoring user may lack PING), means
	// the node is up.
	var reply redis.Error
	if err := node.Ping(ctx).Err(); err != nil && !errors.As(err, &reply) {
		info.Err = err
		add("reachable", Critical, "no answer to PING: "+err.Error(),
			"start the node or fix its address; the lock tolerates at most N-quorum nodes down")
		return info, fs
	}
	info.Reachable = true

	if s, err := node.Info(ctx, "server").Result(); err == nil {
		info.Version, info.RunID = infoField(s, "redis_version"), infoField(s, "run_id")
	}
	if s, err := node.Info(ctx, "replication").Result(); err != nil {
		add("role", Warning, "cannot read INFO replication: "+err.Error(), "allow INFO for the monitoring user")
	} else {
		info.Role = infoField(s, "role")
		info.Replicas, _ = strconv.Atoi(infoField(s, "connected_slaves"))
		if info.Role == "master" {
			add("role", Info, "master", "")
		} else {
			add("role", Critical, "role "+info.Role+": a replica refuses lock writes or serves stale ones",
				"point the client at independent masters")
		}
		if info.Replicas > 0 {
			add("replicas", Warning, fmt.Sprintf("%d connected replicas: a failover to an async replica loses granted locks", info.Replicas),
				"remove the replicas and any failover; Redlock wants independent masters")
		} else {
			add("replicas", Info, "no replicas", "")
		}
	}

	c.checkConfig(ctx, node, &info, add)

	t0 := time.Now()
	if srv, err := node.Time(ctx).Result(); err != nil {
		add("clock", Warning, "cannot read TIME: "+err.Error(), "allow TIME for the monitoring user")
	} else {
		info.RTT = time.Since(t0)
		info.ClockOffset = srv.Sub(t0.Add(info.RTT / 2))
		msg := fmt.Sprintf("clock offset %v vs client (rtt %v)", info.ClockOffset.Round(time.Microsecond), info.RTT.Round(time.Microsecond))
		if info.ClockOffset.Abs() > clockWarning+info.RTT {
			add("clock", Warning, msg+": time sync looks broken, and a clock that jumps breaks TTLs",
				"run chrony/ntpd in slew-only mode on every node and client")
		} else {
			add("clock", Info, msg, "")
		}
	}

	o := node.Options()
	var issues []string
	if o.MaxRetries > 0 {
		issues = append(issues, fmt.Sprintf("go-redis retries %d times, spending validity", o.MaxRetries))
	}
	if !o.ContextTimeoutEnabled && (o.ReadTimeout <= 0 || o.ReadTimeout > c.timeout) {
		issues = append(issues, fmt.Sprintf("read timeout %v ignores the %v request deadline, so a slow node holds connections", o.ReadTimeout, c.timeout))
	}
	if len(issues) > 0 {
		add("client", Warning, strings.Join(issues, "; "), "build node clients with NewNodes (MaxRetries -1, context deadlines)")
	} else {
		add("client", Info, "no command retries; timeouts follow the request deadline", "")
	}
	return info, fs
}

func (c *Client) checkConfig(ctx context.Context, node *redis.Client, info *NodeInfo, add func(check string, sev Severity, msg, fix string)) {
	get := func(param string) (string, error) {
		m, err := node.ConfigGet(ctx, param).Result()
		if err != nil {
			return "", err
		}
		v, ok := m[param]
		if !ok {
			return "", fmt.Errorf("no %s in CONFIG GET reply", param)
		}
		return v, nil
	}
	var err error
	if info.AppendOnly, err = get("appendonly"); err != nil {
		add("config", Warning, "cannot read config: "+err.Error(),
			"grant the monitoring user +config|get, or audit appendonly/appendfsync/maxmemory-policy in redis.conf")
		return
	}
	info.AppendFsync, _ = get("appendfsync")
	info.MaxmemoryPolicy, _ = get("maxmemory-policy")

	if info.AppendOnly == "yes" {
		add("appendonly", Info, "appendonly yes", "")
		if info.AppendFsync == "always" {
			add("appendfsync", Info, "appendfsync always", "")
		} else {
			add("appendfsync", Warning,
				"appendfsync "+info.AppendFsync+": a crash can lose recently granted locks (up to 1s with everysec)",
				"set appendfsync always, or delay every restart by the max TTL")
		}
	} else {
		add("appendonly", Warning, "appendonly "+info.AppendOnly+": a restarted node forgets every lock it granted",
			"set appendonly yes with appendfsync always, or delay every restart by the max TTL")
	}
	if info.MaxmemoryPolicy == "noeviction" {
		add("maxmemory-policy", Info, "maxmemory-policy noeviction", "")
	} else {
		add("maxmemory-policy", Critical, "maxmemory-policy "+info.MaxmemoryPolicy+": a held lock can be evicted under memory pressure",
			"set maxmemory-policy noeviction")
	}
}

// infoField returns the value of "key:value" in an INFO reply.
func infoField(info, key string) string {
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimRight(line, "\r\n"), ":"); ok && k == key {
			return v
		}
	}
	return ""
}

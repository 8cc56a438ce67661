package redlock

import (
	"context"
	"crypto/tls"
	"encoding/json"
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

// Severities, least to most severe, then Unchecked.
const (
	// Info: the check passed; the message states what was seen.
	Info Severity = iota
	// Warning: safe only under an extra condition (delayed restarts, working
	// NTP, …) or costs availability.
	Warning
	// Critical: the lock can be granted twice, or a node is unusable.
	Critical
	// Unchecked is not a grade: the check could not run, because the audit
	// could not log in or was denied a read, so the practice it audits may
	// hold or not.
	Unchecked
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
	case Unchecked:
		return "unchecked"
	}
	return "severity(" + strconv.Itoa(int(s)) + ")"
}

// MarshalText renders s as its String, so JSON carries "critical", not 2.
func (s Severity) MarshalText() ([]byte, error) {
	if s > Unchecked {
		return nil, fmt.Errorf("redlock: unknown severity %d", uint8(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText parses what MarshalText writes.
func (s *Severity) UnmarshalText(b []byte) error {
	for v := Info; v <= Unchecked; v++ {
		if string(b) == v.String() {
			*s = v
			return nil
		}
	}
	return fmt.Errorf("redlock: unknown severity %q", b)
}

// Finding is one result of Check.
type Finding struct {
	// Node is the 0-based node index, or -1 for the node set as a whole.
	Node int `json:"node"`
	// Check names what was audited: "reachable", "login", "role",
	// "replicas", "run_id", "tls", "appendonly", "appendfsync",
	// "maxmemory-policy", "clock", "client", "nodes", "timeouts".
	Check string `json:"check"`
	// Severity grades the finding.
	Severity Severity `json:"severity"`
	// Message says what was found, in one line.
	Message string `json:"message"`
	// Fix says what to do about it, as one sentence; empty for Info.
	Fix string `json:"fix,omitempty"`
}

// NodeInfo is what Check read from one node. String fields are empty when
// they could not be read.
type NodeInfo struct {
	// Node is the 0-based node index; Addr its address.
	Node int
	Addr string
	// Reachable reports whether the node answered PING, even with a refusal.
	Reachable bool
	// Err is why the node could not be reached or, for a reachable node,
	// why the audit could not log in to it (LoginFailed).
	Err error
	// LoginFailed reports that the node refused the audit's login (NOAUTH:
	// none given, WRONGPASS: a wrong user or password), so no setting of
	// it was read.
	LoginFailed bool
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
	// TLS is the protocol version of a TLS connection ("TLS 1.3"), empty
	// for plain TCP; CertNotAfter is when the node's certificate expires.
	TLS          string
	CertNotAfter time.Time
}

// MarshalJSON writes the node's fields in snake case, Err as a string and
// the durations in nanoseconds.
func (n NodeInfo) MarshalJSON() ([]byte, error) {
	errText, notAfter := "", ""
	if n.Err != nil {
		errText = n.Err.Error()
	}
	if !n.CertNotAfter.IsZero() {
		notAfter = n.CertNotAfter.UTC().Format(time.RFC3339)
	}
	return json.Marshal(struct {
		Node            int    `json:"node"`
		Addr            string `json:"addr"`
		Reachable       bool   `json:"reachable"`
		LoginFailed     bool   `json:"login_failed,omitempty"`
		Err             string `json:"error,omitempty"`
		Version         string `json:"version,omitempty"`
		RunID           string `json:"run_id,omitempty"`
		Role            string `json:"role,omitempty"`
		Replicas        int    `json:"replicas"`
		AppendOnly      string `json:"appendonly,omitempty"`
		AppendFsync     string `json:"appendfsync,omitempty"`
		MaxmemoryPolicy string `json:"maxmemory_policy,omitempty"`
		ClockOffsetNs   int64  `json:"clock_offset_ns"`
		RTTNs           int64  `json:"rtt_ns"`
		TLS             string `json:"tls,omitempty"`
		CertNotAfter    string `json:"cert_not_after,omitempty"`
	}{n.Node, n.Addr, n.Reachable, n.LoginFailed, errText, n.Version, n.RunID, n.Role, n.Replicas,
		n.AppendOnly, n.AppendFsync, n.MaxmemoryPolicy, int64(n.ClockOffset), int64(n.RTT), n.TLS, notAfter})
}

// Report is the result of Check.
type Report struct {
	Nodes    []NodeInfo `json:"nodes"`
	Findings []Finding  `json:"findings"`
}

// Summary counts a Report's nodes and findings.
type Summary struct {
	// Nodes is how many nodes were audited; Unreachable how many of them did
	// not answer.
	Nodes       int `json:"nodes"`
	Unreachable int `json:"unreachable"`
	// LoginFailed counts the reachable nodes that refused the audit's login.
	LoginFailed int `json:"login_failed,omitempty"`
	// Critical, Warning, OK and Unchecked count the findings by severity
	// (OK: Info, the check passed; Unchecked: it could not run). Findings
	// cover single nodes and the node set as a whole, so they do not add up
	// to a multiple of Nodes.
	Critical  int `json:"critical"`
	Warning   int `json:"warning"`
	OK        int `json:"ok"`
	Unchecked int `json:"unchecked,omitempty"`
}

// Summary counts the report's nodes and findings.
func (r Report) Summary() Summary {
	s := Summary{Nodes: len(r.Nodes)}
	for _, n := range r.Nodes {
		if !n.Reachable {
			s.Unreachable++
		}
		if n.LoginFailed {
			s.LoginFailed++
		}
	}
	for _, f := range r.Findings {
		switch f.Severity {
		case Critical:
			s.Critical++
		case Warning:
			s.Warning++
		case Unchecked:
			s.Unchecked++
		default:
			s.OK++
		}
	}
	return s
}

// String renders the summary as one line, e.g.
// "3 nodes (2 unreachable); 27 findings: 2 critical, 1 warning, 24 ok", or
// "3 nodes (3 refused the login); 23 findings: 0 critical, 0 warnings,
// 14 unchecked, 9 ok".
func (s Summary) String() string {
	nodes := plural(s.Nodes, "node")
	var why []string
	if s.Unreachable > 0 {
		why = append(why, fmt.Sprintf("%d unreachable", s.Unreachable))
	}
	if s.LoginFailed > 0 {
		why = append(why, fmt.Sprintf("%d refused the login", s.LoginFailed))
	}
	if len(why) > 0 {
		nodes += " (" + strings.Join(why, ", ") + ")"
	}
	unchecked := ""
	if s.Unchecked > 0 {
		unchecked = fmt.Sprintf(", %d unchecked", s.Unchecked)
	}
	return fmt.Sprintf("%s; %s: %d critical, %s%s, %d ok", nodes, plural(s.Critical+s.Warning+s.Unchecked+s.OK, "finding"),
		s.Critical, plural(s.Warning, "warning"), unchecked, s.OK)
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
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

// Complete reports whether every check ran: no finding is Unchecked. An
// audit that is not complete has not shown the nodes safe, whatever its
// other findings say.
func (r Report) Complete() bool {
	for _, f := range r.Findings {
		if f.Severity == Unchecked {
			return false
		}
	}
	return true
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
// monitoring commands (PING, INFO, CONFIG GET, TIME), which the node's
// monitoring user may run. A check that could not read what it needs (no
// login, a wrong password, a command the user may not run) is Unchecked,
// with the reason; a node that refuses the login gets one "login" finding
// and its settings' checks Unchecked. A node that cannot be reached is
// Critical. The error is non-nil only when ctx ended.
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
			rep.Nodes[i], perNode[i] = c.checkNode(ctx, i, node, cfg.ttl)
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
				Message: fmt.Sprintf("same run_id as node %d (%s): both addresses reach one server", first+1, c.addrs[first]),
				Fix: fmt.Sprintf("List every server once: nodes %d and %d are the same server, so the %d addresses give fewer than %d independent masters.",
					first+1, i+1, len(c.nodes), len(c.nodes))})
		} else {
			seen[id] = i
			rep.Findings = append(rep.Findings, Finding{Node: i, Check: "run_id", Severity: Info,
				Message: "run_id " + shortID(id) + " is unique"})
		}
	}
	// What an unreachable node costs depends on how many others answer.
	up := len(rep.Nodes) - rep.Summary().Unreachable
	for i, f := range rep.Findings {
		if f.Check == "reachable" && f.Severity == Critical {
			rep.Findings[i].Fix = c.unreachableFix(up)
		}
	}
	return rep, nil
}

// unreachableFix is the fix of an unreachable node when up nodes answer.
func (c *Client) unreachableFix(up int) string {
	n := len(c.nodes)
	switch spare := up - c.quorum; {
	case spare < 0:
		return fmt.Sprintf("Start the node or fix its address: only %d of %d nodes answer and the quorum is %d, so every acquire fails.", up, n, c.quorum)
	case spare == 0:
		return fmt.Sprintf("Start the node or fix its address: %d of %d nodes answer, exactly the quorum, so one more failure stops every acquire.", up, n)
	default:
		return fmt.Sprintf("Start the node or fix its address: %d of %d nodes answer, so the lock (quorum %d) survives %s more.", up, n, c.quorum, plural(spare, "failure"))
	}
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
		f.Severity = Warning
		f.Fix = fmt.Sprintf("Use 3 or 5 independent nodes: with %s the quorum is %d and no node may fail.", plural(n, "node"), c.quorum)
		f.Message += ": no fault tolerance"
	case n%2 == 0:
		f.Severity = Warning
		f.Fix = fmt.Sprintf("Use %d or %d nodes: %d nodes need %d for a quorum and tolerate %d down, no more than %d nodes do.",
			n-1, n+1, n, c.quorum, tolerates, n-1)
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
		f.Fix = fmt.Sprintf("Use a per-node timeout of at most %v (1%% of the %v TTL; NewNodes takes it as WithNodeTimeout): a silent node costs every acquire that long.", ttl/100, ttl)
	}
	return f
}

func (c *Client) checkNode(ctx context.Context, i int, node *redis.Client, ttl time.Duration) (NodeInfo, []Finding) {
	info := NodeInfo{Node: i, Addr: c.addrs[i]}
	var fs []Finding
	add := func(check string, sev Severity, msg, fix string) {
		fs = append(fs, Finding{Node: i, Check: check, Severity: sev, Message: msg, Fix: fix})
	}
	wait := max(10*c.timeout, time.Second)
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	// The audit reads settings, not speed: it talks to the node through a
	// client of its own whose socket timeouts are the audit's, so one reply
	// slower than the lock's short request timeout on a busy machine does
	// not leave a check unread. checkClient still judges the caller's client.
	given := node
	node = auditClient(node, wait)
	defer node.Close()

	// Any reply, even an ACL refusal (a monitoring user may lack PING), means
	// the node is up.
	var reply redis.Error
	pingErr := node.Ping(ctx).Err()
	if pingErr != nil && !errors.As(pingErr, &reply) {
		info.Err = pingErr
		add("reachable", Critical, "no answer to PING: "+pingErr.Error(), "") // Check fills in the fix
		return info, fs
	}
	info.Reachable = true
	checkTLS(ctx, node, &info, time.Now(), add)
	if loginRefused(pingErr) {
		info.Err, info.LoginFailed = pingErr, true
		user := node.Options().Username
		who := "no login was given"
		if user != "" {
			who = "the login as " + user + " was refused"
		} else if node.Options().Password != "" {
			who = "the login as the default user was refused"
		}
		const fix = "Log in as the node set's monitoring user, which may run INFO, CONFIG GET and TIME (WithAuth)."
		add("login", Unchecked, fmt.Sprintf("%s (%v): no setting of this node was read", who, pingErr), fix)
		for _, check := range settingChecks {
			add(check, Unchecked, "not read: the node refused the login", "See the login line above.")
		}
		checkClient(given, c.timeout, add)
		return info, fs
	}

	if s, err := node.Info(ctx, "server").Result(); err == nil {
		info.Version, info.RunID = infoField(s, "redis_version"), infoField(s, "run_id")
	} else {
		add("run_id", Unchecked, "cannot read INFO server: "+err.Error(), readFix(err, "INFO (+info)"))
	}
	if s, err := node.Info(ctx, "replication").Result(); err != nil {
		for _, check := range []string{"role", "replicas"} {
			add(check, Unchecked, "cannot read INFO replication: "+err.Error(), readFix(err, "INFO (+info)"))
		}
	} else {
		info.Role = infoField(s, "role")
		info.Replicas, _ = strconv.Atoi(infoField(s, "connected_slaves"))
		if info.Role == "master" {
			add("role", Info, "master", "")
		} else {
			of := ""
			if h, p := infoField(s, "master_host"), infoField(s, "master_port"); h != "" {
				of = " of " + h + ":" + p
			}
			add("role", Critical, fmt.Sprintf("role %s: this node is a replica%s, a copy of another node, not an independent node: "+
				"it refuses lock writes, and once promoted it lacks the locks its master granted last", info.Role, of),
				fmt.Sprintf("Point the client at %d independent masters, each without replicas or failover: Redlock's votes count only if the nodes fail independently.", len(c.nodes)))
		}
		if info.Replicas > 0 {
			add("replicas", Critical, fmt.Sprintf("master with %s: replication is asynchronous, so a failover promotes a copy without the locks granted last, "+
				"and a second client takes a lock the first still holds", plural(info.Replicas, "connected replica")),
				fmt.Sprintf("Remove the %s and any failover (Sentinel, a managed endpoint): a replica is not an independent node; for availability add independent masters (5 tolerate 2 down).",
					plural(info.Replicas, "replica")))
		} else {
			add("replicas", Info, "no replicas", "")
		}
	}

	auditConfig(ctx, node, &info, ttl, add)

	t0 := time.Now()
	if srv, err := node.Time(ctx).Result(); err != nil {
		add("clock", Unchecked, "cannot read TIME: "+err.Error(), readFix(err, "TIME (+time)"))
	} else {
		info.RTT = time.Since(t0)
		info.ClockOffset = srv.Sub(t0.Add(info.RTT / 2))
		msg := fmt.Sprintf("clock offset %v vs client (rtt %v)", info.ClockOffset.Round(time.Microsecond), info.RTT.Round(time.Microsecond))
		if info.ClockOffset.Abs() > clockWarning+info.RTT {
			add("clock", Warning, msg+": time sync looks broken, and a clock that jumps breaks TTLs",
				fmt.Sprintf("Run chrony or ntpd in slew-only mode on every node and client: this node is %v off, more than the %v allowed.",
					info.ClockOffset.Abs().Round(time.Millisecond), clockWarning))
		} else {
			add("clock", Info, msg, "")
		}
	}

	checkClient(given, c.timeout, add)
	return info, fs
}

// settingChecks are the checks that read the node's settings, all
// Unchecked when the node refuses the login.
var settingChecks = []string{"role", "replicas", "run_id", "appendonly", "appendfsync", "maxmemory-policy", "clock"}

// loginRefused reports whether err says that the node wants a login
// (NOAUTH) or refused the one given (WRONGPASS, or requirepass's "invalid
// password" before Redis 6).
func loginRefused(err error) bool {
	return redis.IsAuthError(err) || redis.HasErrorPrefix(err, "ERR invalid password")
}

// readFix is the fix for a read of what that failed with err: the
// monitoring user's missing permission, or nothing to do but try again.
func readFix(err error, what string) string {
	if redis.IsPermissionError(err) {
		return "Allow " + what + " for the monitoring user."
	}
	return "Audit the node again once it answers; if it keeps failing, read its log."
}

// checkClient audits the client's own settings for the node: what the
// lock client would do, whatever the node says.
// auditClient is a one-connection client to node's address, with node's
// login and TLS, whose dial, read and write timeouts are timeout.
func auditClient(node *redis.Client, timeout time.Duration) *redis.Client {
	o := *node.Options()
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = timeout, timeout, timeout
	o.PoolSize, o.MinIdleConns, o.MaxIdleConns = 1, 0, 1
	return redis.NewClient(&o)
}

func checkClient(node *redis.Client, timeout time.Duration, add func(check string, sev Severity, msg, fix string)) {
	o := node.Options()
	var issues []string
	if o.MaxRetries > 0 {
		issues = append(issues, fmt.Sprintf("go-redis retries %d times, spending validity", o.MaxRetries))
	}
	if !o.ContextTimeoutEnabled && (o.ReadTimeout <= 0 || o.ReadTimeout > timeout) {
		issues = append(issues, fmt.Sprintf("read timeout %v ignores the %v request deadline, so a slow node holds connections", o.ReadTimeout, timeout))
	}
	if len(issues) > 0 {
		add("client", Warning, strings.Join(issues, "; "), "Build node clients with NewNodes: no command retries (MaxRetries -1) and timeouts from the request deadline.")
	} else {
		add("client", Info, "no command retries; timeouts follow the request deadline", "")
	}
}

// certWarning is how long before its certificate expires a node gets a
// Warning: time to renew it before every handshake fails.
const certWarning = 30 * 24 * time.Hour

// checkTLS reports whether the node's connection is TLS and, if so, its
// protocol version and when the node's certificate expires, read from a
// connection of its own made by the client's dialer.
func checkTLS(ctx context.Context, node *redis.Client, info *NodeInfo, now time.Time, add func(check string, sev Severity, msg, fix string)) {
	o := node.Options()
	if o.TLSConfig == nil {
		add("tls", Info, "plain TCP, no TLS", "")
		return
	}
	conn, err := o.Dialer(ctx, o.Network, o.Addr)
	if err != nil {
		add("tls", Warning, "cannot open a TLS connection of its own: "+err.Error(), "")
		return
	}
	defer conn.Close()
	tc, ok := conn.(interface{ ConnectionState() tls.ConnectionState })
	if !ok {
		add("tls", Warning, "TLS configured, but the client's dialer gives no TLS connection", "Build node clients with NewNodes and WithTLS.")
		return
	}
	st := tc.ConnectionState()
	info.TLS = tls.VersionName(st.Version)
	if len(st.PeerCertificates) == 0 {
		add("tls", Warning, info.TLS+", but the node sent no certificate", "")
		return
	}
	info.CertNotAfter = st.PeerCertificates[0].NotAfter
	left := info.CertNotAfter.Sub(now)
	msg := fmt.Sprintf("%s, certificate valid until %s (%s)", info.TLS, info.CertNotAfter.UTC().Format("2006-01-02 15:04 MST"), plural(int(left.Hours()/24), "day"))
	if left < certWarning {
		add("tls", Warning, msg+": it expires in under 30 days",
			fmt.Sprintf("Renew the node's certificate before %s: after that every client's handshake fails and the node counts as down.", info.CertNotAfter.UTC().Format("2006-01-02")))
		return
	}
	add("tls", Info, msg, "")
}

func auditConfig(ctx context.Context, node *redis.Client, info *NodeInfo, ttl time.Duration, add func(check string, sev Severity, msg, fix string)) {
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
		fix := readFix(err, "CONFIG GET (+config|get)")
		if redis.IsPermissionError(err) {
			fix = "Allow CONFIG GET for the monitoring user (+config|get), or audit appendonly, appendfsync and maxmemory-policy in redis.conf by hand."
		}
		for _, check := range []string{"appendonly", "appendfsync", "maxmemory-policy"} {
			add(check, Unchecked, "cannot read CONFIG GET: "+err.Error(), fix)
		}
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
				fmt.Sprintf("Set appendfsync always, or delay every restart of this node by the max lock TTL (%v here).", ttl))
		}
	} else {
		add("appendonly", Warning, "appendonly "+info.AppendOnly+": a restarted node forgets every lock it granted",
			fmt.Sprintf("Set appendonly yes with appendfsync always, or delay every restart of this node by the max lock TTL (%v here).", ttl))
	}
	if info.MaxmemoryPolicy == "noeviction" {
		add("maxmemory-policy", Info, "maxmemory-policy noeviction", "")
	} else {
		add("maxmemory-policy", Critical, "maxmemory-policy "+info.MaxmemoryPolicy+": a held lock can be evicted under memory pressure",
			"Set maxmemory-policy noeviction: a full node then refuses new locks instead of dropping held ones.")
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

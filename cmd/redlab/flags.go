package main

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/loadgen"
	"github.com/redlocklab/redlocklab/redlock/nodeaddr"
)

// The environment `redlab lab up` exports (see labExports) and the commands
// read when their flag is not given.
const (
	envNodes    = "REDLAB_NODES"
	envStateDir = "REDLAB_STATE_DIR"
	// envEtcd is the lab's etcd endpoints (client fronts), comma-separated:
	// lab up exports it for etcd clients (clientv3.Config.Endpoints).
	envEtcd = "REDLAB_ETCD"
	// envPassword is never a flag: ps would show it.
	envPassword = "REDLAB_PASSWORD"
	// envHosts is the hosts inventory of a lab with --machines --ssh, which
	// lab up exports; --hosts is always given explicitly (an inventory in
	// the environment must not turn a lab drill into one on hosts).
	envHosts = "REDLAB_HOSTS"
)

// nodesFlag is the --nodes value every subcommand shares: a node list as
// redlock/nodeaddr parses it, host:port[,…] or rediss://host:port[,…] for
// TLS. When the flag is absent, REDLAB_NODES (as exported by `redlab lab
// up`) is used.
type nodesFlag nodeaddr.List

func (f *nodesFlag) String() string { return nodeaddr.List(*f).String() }
func (f *nodesFlag) Type() string   { return "ADDR[,ADDR...]" }
func (f *nodesFlag) Set(s string) error {
	l, err := nodeaddr.Parse(s)
	if err != nil {
		return err
	}
	*f = nodesFlag(l)
	return nil
}

// nodesUsage is the help of every --nodes, after what the nodes are for.
const nodesUsage = ": host:port,... or, for TLS, rediss://host:port,... (all TLS or none: a mixed list is refused, since one plain node would carry the lock traffic and the password in clear)"

// orEnv returns the flag's nodes, or those of REDLAB_NODES when the flag was
// not given. It fails when neither names a node.
func (f nodesFlag) orEnv() (nodeaddr.List, error) {
	if len(f.Addrs) > 0 {
		return nodeaddr.List(f), nil
	}
	if v := os.Getenv(envNodes); v != "" {
		l, err := nodeaddr.Parse(v)
		if err != nil {
			return nodeaddr.List{}, fmt.Errorf("%s: %w", envNodes, err)
		}
		return l, nil
	}
	return nodeaddr.List{}, fmt.Errorf("--nodes is required (or set %s: eval \"$(redlab lab up | tail -1)\")", envNodes)
}

// etcdFlag is the --etcd value of the commands that run the etcd guards:
// URL[,URL…], each an etcd member's client URL, http(s)://host:port. When
// the flag is absent, REDLAB_ETCD is used.
type etcdFlag []string

func (f *etcdFlag) String() string     { return strings.Join(*f, ",") }
func (f *etcdFlag) Type() string       { return "URL[,URL...]" }
func (f *etcdFlag) Set(s string) error { return setList((*[]string)(f), s, parseEtcd) }

// orEnv returns the flag's endpoints, or those of REDLAB_ETCD when the flag
// was not given. It fails when neither names one.
func (f etcdFlag) orEnv() ([]string, error) {
	return listOrEnv(f, envEtcd, parseEtcd, fmt.Errorf("--etcd is required (or set %s): the etcd members' client URLs, http://host:port[,...]", envEtcd))
}

func parseEtcd(s string) ([]string, error) {
	return parseList(s, "etcd endpoint", func(a string) error {
		u, err := url.Parse(a)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") {
			return errors.New("want http://host:port or https://host:port")
		}
		if p, err := strconv.Atoi(u.Port()); err != nil || p < 1 || p > 65535 {
			return errors.New("port must be 1-65535")
		}
		return nil
	})
}

// setList is the Set of a list flag: the parsed value replaces the old.
func setList(dst *[]string, s string, parse func(string) ([]string, error)) error {
	vals, err := parse(s)
	if err != nil {
		return err
	}
	*dst = vals
	return nil
}

// listOrEnv returns a list flag's values, or those of the environment
// variable env when the flag was not given, or missing when neither has any.
func listOrEnv(vals []string, env string, parse func(string) ([]string, error), missing error) ([]string, error) {
	if len(vals) > 0 {
		return vals, nil
	}
	if v := os.Getenv(env); v != "" {
		out, err := parse(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", env, err)
		}
		return out, nil
	}
	return nil, missing
}

// parseList splits a comma-separated list of what (blanks around the commas
// and empty items ignored), checks each item, and refuses repeats and an
// empty list.
func parseList(s, what string, check func(string) error) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, a := range strings.Split(s, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if err := check(a); err != nil {
			return nil, fmt.Errorf("%s %q: %w", what, a, err)
		}
		if seen[a] {
			return nil, fmt.Errorf("%s %q listed twice", what, a)
		}
		seen[a] = true
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no %ss in %q", what, s)
	}
	return out, nil
}

// stateDir is the lab state directory a command works on: the flag, else
// REDLAB_STATE_DIR (exported by `redlab lab up`), else ./.redlab.
func stateDir(flag string) string {
	if flag != "" {
		return flag
	}
	if v := os.Getenv(envStateDir); v != "" {
		return v
	}
	return lab.DefaultStateDir
}

const stateDirUsage = "the lab's state directory (default $" + envStateDir + ", else ./" + lab.DefaultStateDir + ")"

// persistenceListFlag is one profile for every node, or one per node:
// always,always,everysec,everysec,everysec.
type persistenceListFlag []lab.Persistence

func (f *persistenceListFlag) String() string { return node.FormatPersistenceList(*f) }
func (f *persistenceListFlag) Type() string   { return "PROFILE[,PROFILE...]" }
func (f *persistenceListFlag) Set(s string) error {
	ps, err := node.ParsePersistenceList(s)
	if err != nil {
		return err
	}
	*f = ps
	return nil
}

// rateFlag is --rate: "500" or "500/1s".
type rateFlag struct{ v float64 }

func (f *rateFlag) String() string { return strconv.FormatFloat(f.v, 'f', -1, 64) }
func (f *rateFlag) Type() string   { return "N[/PERIOD]" }
func (f *rateFlag) Set(s string) error {
	r, err := loadgen.ParseRate(s)
	if err != nil {
		return err
	}
	f.v = r
	return nil
}

// ratesFlag is --rates: 500,1000,2000.
type ratesFlag []float64

func (f *ratesFlag) String() string {
	parts := make([]string, len(*f))
	for i, r := range *f {
		parts[i] = strconv.FormatFloat(r, 'f', -1, 64)
	}
	return strings.Join(parts, ",")
}
func (f *ratesFlag) Type() string { return "RATE,RATE,..." }
func (f *ratesFlag) Set(s string) error {
	r, err := loadgen.ParseRates(s)
	if err != nil {
		return err
	}
	*f = r
	return nil
}

// stagesFlag is --stages: "30s:500,60s:2000,30s:0".
type stagesFlag []loadgen.Stage

func (f *stagesFlag) String() string { return loadgen.FormatStages(*f) }
func (f *stagesFlag) Type() string   { return "DUR:RATE,..." }
func (f *stagesFlag) Set(s string) error {
	st, err := loadgen.ParseStages(s)
	if err != nil {
		return err
	}
	*f = st
	return nil
}

// holdFlag is a hold distribution: D, const:D or uniform:MIN:MAX.
type holdFlag loadgen.HoldSpec

func (f *holdFlag) String() string {
	if loadgen.HoldSpec(*f).IsZero() {
		return "0s"
	}
	return loadgen.HoldSpec(*f).String()
}
func (f *holdFlag) Type() string { return "D|uniform:MIN:MAX" }
func (f *holdFlag) Set(s string) error {
	h, err := loadgen.ParseHold(s)
	if err != nil {
		return err
	}
	*f = holdFlag(h)
	return nil
}

// keysFlag is --keys: uniform:N, zipf:N:θ, hot:N:fraction[:hotkeys].
type keysFlag loadgen.KeySpec

func (f *keysFlag) String() string { return loadgen.KeySpec(*f).String() }
func (f *keysFlag) Type() string   { return "SPEC" }
func (f *keysFlag) Set(s string) error {
	k, err := loadgen.ParseKeys(s)
	if err != nil {
		return err
	}
	*f = keysFlag(k)
	return nil
}

// quantityFlag is --quantity: N, const:N or uniform:MIN:MAX.
type quantityFlag loadgen.QuantitySpec

func (f *quantityFlag) String() string { return loadgen.QuantitySpec(*f).String() }
func (f *quantityFlag) Type() string   { return "SPEC" }
func (f *quantityFlag) Set(s string) error {
	q, err := loadgen.ParseQuantity(s)
	if err != nil {
		return err
	}
	*f = quantityFlag(q)
	return nil
}

// thresholdsFlag is a repeatable --threshold (or --slo).
type thresholdsFlag []loadgen.Threshold

func (f *thresholdsFlag) String() string {
	parts := make([]string, len(*f))
	for i, t := range *f {
		parts[i] = t.Expr
	}
	return strings.Join(parts, " ")
}
func (f *thresholdsFlag) Type() string { return "EXPR" }
func (f *thresholdsFlag) Set(s string) error {
	t, err := loadgen.ParseThreshold(s)
	if err != nil {
		return err
	}
	*f = append(*f, t)
	return nil
}

// checkNodes refuses a per-node threshold (node<N>.…) naming a node the run
// does not time: nodes is how many lock nodes report per-node latency, and
// why explains a count of zero. A run would otherwise fail only at its end.
func (f thresholdsFlag) checkNodes(flag string, nodes int, why string) error {
	for _, t := range f {
		head, _, _ := strings.Cut(t.Metric, ".")
		digits, ok := strings.CutPrefix(head, "node")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(digits) // ParseThreshold accepted it: node1, node2, …
		if err != nil {
			continue
		}
		switch {
		case nodes == 0:
			return fmt.Errorf("%s %q: %s", flag, t.Expr, why)
		case n > nodes:
			return fmt.Errorf("%s %q: there is no node%d; the run times %d lock nodes, node1 to node%d", flag, t.Expr, n, nodes, nodes)
		}
	}
	return nil
}

// workerFlag is --worker i/M.
type workerFlag loadgen.Shard

func (f *workerFlag) String() string { return loadgen.Shard(*f).String() }
func (f *workerFlag) Type() string   { return "i/M" }
func (f *workerFlag) Set(s string) error {
	sh, err := loadgen.ParseShard(s)
	if err != nil {
		return err
	}
	*f = workerFlag(sh)
	return nil
}

// targetFlag is --target: "noop" or http(s) base URLs.
type targetFlag []string

func (f *targetFlag) String() string { return strings.Join(*f, ",") }
func (f *targetFlag) Type() string   { return "noop|URL[,URL...]" }
func (f *targetFlag) Set(s string) error {
	if strings.TrimSpace(s) == "noop" {
		*f = []string{"noop"}
		return nil
	}
	var out []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return fmt.Errorf("target %q: want noop or http(s)://host:port", u)
		}
		out = append(out, u)
	}
	if len(out) == 0 {
		return fmt.Errorf("no target in %q", s)
	}
	*f = out
	return nil
}

// restartDelayWarning says, when the lab in the environment's state
// directory restarts a crashed node sooner than ttl, what that risks; ""
// when it does not, or when there is no such lab. The Redlock page asks
// that a restarted node wait "at least a bit more than the max TTL".
func restartDelayWarning(ttl time.Duration) string {
	l, err := lab.Open(stateDir(""))
	if err != nil {
		return ""
	}
	p := l.Profile()
	switch {
	case p.NoRestartDelay:
		return fmt.Sprintf("warning: the lab in %s restarts a crashed node at once, with locks of %v in use: a node that lost its keys can hand a held lock out again (the Redlock page: a restarted node waits a bit more than the max TTL; lab up --restart-delay)", l.StateDir(), ttl)
	case p.RestartDelay < ttl:
		return fmt.Sprintf("warning: the lab in %s restarts a crashed node after %v, less than the lock TTL of %v in use: a node that lost its keys can hand a held lock out again (the Redlock page: a restarted node waits a bit more than the max TTL; lab up --restart-delay)", l.StateDir(), p.RestartDelay, ttl)
	}
	return ""
}

package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/redlock"
)

// doctorOptions are the flags of `redlab doctor`.
type doctorOptions struct {
	nodes   nodesFlag
	tls     tlsFlags
	ttl     time.Duration
	timeout time.Duration
	login   login
	asJSON  bool
}

func newDoctorCmd(e *env) *cobra.Command {
	o := doctorOptions{ttl: redlock.DefaultCheckTTL, timeout: redlock.DefaultNodeTimeout}
	c := &cobra.Command{
		Use:   "doctor",
		Short: "audit Redis nodes against the Redlock practices",
		Long: `Audits every node against the practices Redlock's safety rests on:
persistence (appendonly, appendfsync), eviction, role and replicas, distinct
run_ids, clock offset, and client timeouts against the lock TTL; with
rediss:// nodes, each node's TLS version and certificate expiry (a warning
under 30 days), and for a node whose handshake fails, why.

Prints one finding per line and a summary: how many nodes were audited and
how many did not answer or refused the login, then the findings by
severity (ok: the check passed; unchecked: the check could not read what it
needs, so the practice may hold or not). Findings are about single nodes and
about the node set as a whole. With --json the same report goes to stdout as
JSON: "nodes", "findings" (each "node" is an index into "nodes", -1 for the
node set) and "summary".

The nodes' settings are readable only to their monitoring user: log in as
it with $` + lab.CredentialsEnv + ` (the lab's credentials file, which ` + "`redlab lab up`" + `
exports), or with --username and the password in $` + envPassword + `.

Exit 0 when no finding is critical or unchecked, 1 otherwise (an audit that
could not log in has shown nothing), 2 on a usage error.`,
		Example: `  redlab doctor                                  # the nodes of $REDLAB_NODES
  redlab doctor --nodes 10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379 --ttl 30s
  redlab doctor --nodes rediss://10.0.0.1:6379,rediss://10.0.0.2:6379,rediss://10.0.0.3:6379 --tls-ca ca.crt
  REDLAB_PASSWORD=... redlab doctor --username monitor --json
  eval "$(redlab lab up | tail -1)"; redlab doctor   # the lab's nodes, as its monitor user`,
		RunE: func(c *cobra.Command, _ []string) error {
			nodes, err := o.nodes.orEnv()
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			tlsCfg, err := o.tls.config(nodes)
			if err != nil {
				return err
			}
			user, password, err := o.login.resolve()
			if err != nil {
				return err
			}
			switch {
			case o.ttl <= 0:
				return usageErrorf("--ttl must be positive, got %v", o.ttl)
			case o.timeout <= 0:
				return usageErrorf("--timeout must be positive, got %v", o.timeout)
			}
			return o.run(c, e, nodes.Addrs, tlsCfg, user, password)
		},
	}
	fs := c.Flags()
	fs.Var(&o.nodes, "nodes", "Redis nodes to audit (default $"+envNodes+")"+nodesUsage)
	o.tls.register(fs)
	fs.DurationVar(&o.ttl, "ttl", o.ttl, "lock TTL in use, to judge the client timeouts against")
	fs.DurationVar(&o.timeout, "timeout", o.timeout, "per-node dial/read/write timeout of the lock client")
	o.login.register(fs, node.UserMonitor)
	fs.BoolVar(&o.asJSON, "json", false, "print the report as JSON, for scripts")
	return c
}

func (o *doctorOptions) run(c *cobra.Command, e *env, addrs []string, tlsCfg *tls.Config, user, password string) error {
	nopts := []redlock.NodeOption{redlock.WithNodeTimeout(o.timeout), redlock.WithTLS(tlsCfg)}
	if user != "" || password != "" {
		nopts = append(nopts, redlock.WithAuth(user, password))
	}
	nodes := redlock.NewNodes(addrs, nopts...)
	defer func() {
		for _, n := range nodes {
			n.Close()
		}
	}()
	cl, err := redlock.New(nodes)
	if err != nil {
		return err
	}
	defer cl.Close()
	rep, err := cl.Check(c.Context(), redlock.WithTTL(o.ttl))
	if err != nil {
		return err
	}
	if w := restartDelayWarning(o.ttl); w != "" {
		fmt.Fprintln(e.stderr, w)
	}
	sum := rep.Summary()
	if o.asJSON {
		err = writeJSON(e.stdout, struct {
			redlock.Report
			Summary redlock.Summary `json:"summary"`
		}{rep, sum})
	} else {
		err = printReport(e.stdout, rep, sum)
	}
	if err != nil {
		return err
	}
	return auditError(rep, sum, user)
}

// auditError says why an audit fails: critical findings, checks that could
// not run and, first, nodes that refused the login, with the way to log in.
func auditError(rep redlock.Report, sum redlock.Summary, user string) error {
	var why []string
	if sum.LoginFailed > 0 {
		var first error
		for _, n := range rep.Nodes {
			if n.LoginFailed {
				first = n.Err
				break
			}
		}
		as := "without a login"
		if user != "" {
			as = "as " + user
		}
		why = append(why, fmt.Sprintf("could not log in to %d of %d nodes %s (%v), so their settings are unchecked: "+
			"log in as the monitoring user with $%s (the lab's credentials file, which `redlab lab up` exports), "+
			"or with --username %s and its password in $%s",
			sum.LoginFailed, sum.Nodes, as, first, lab.CredentialsEnv, node.UserMonitor, envPassword))
	} else if sum.Unchecked > 0 {
		why = append(why, countOf(sum.Unchecked, "unchecked finding")+": see the FIX column")
	}
	if sum.Critical > 0 {
		why = append(why, countOf(sum.Critical, "critical finding")+": see the FIX column")
	}
	if len(why) == 0 {
		return nil
	}
	return errors.New(strings.Join(why, "; "))
}

// printReport writes the findings as an aligned table, then the summary.
func printReport(w io.Writer, rep redlock.Report, sum redlock.Summary) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tCHECK\tSEVERITY\tMESSAGE\tFIX")
	for _, f := range rep.Findings {
		node := "all"
		if f.Node >= 0 && f.Node < len(rep.Nodes) {
			node = strconv.Itoa(f.Node+1) + " " + rep.Nodes[f.Node].Addr // numbered from 1, as in every command
		}
		fix := f.Fix
		if fix == "" {
			fix = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", node, f.Check, f.Severity, f.Message, fix)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%s\n", sum)
	return err
}

// countOf is "1 finding", "3 findings".
func countOf(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

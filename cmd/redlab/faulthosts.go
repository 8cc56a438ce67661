package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/hostfault"
	"github.com/redlocklab/redlocklab/infra/hosts"
	"github.com/redlocklab/redlocklab/infra/remote"
)

// hostsOptions are the flags that point a command at real hosts over SSH
// instead of the lab.
type hostsOptions struct {
	file     string
	insecure bool
}

func addHostsFlags(fs *pflag.FlagSet, o *hostsOptions) {
	fs.StringVar(&o.file, "hosts", "", "act on the hosts of this inventory over SSH instead of the lab (redlab hosts --help)")
	fs.BoolVar(&o.insecure, "insecure-ignore-host-key", false, "with --hosts: accept any SSH host key (throwaway hosts only; warns on stderr every time)")
}

// faultHostsOptions are `redlab fault`'s flags for real hosts.
type faultHostsOptions struct {
	hostsOptions
	hold    time.Duration
	deadMan time.Duration
	from    []string
}

func addFaultHostsFlags(fs *pflag.FlagSet, o *faultHostsOptions) {
	addHostsFlags(fs, &o.hostsOptions)
	fs.DurationVar(&o.hold, "hold", 0, "with --hosts: keep the fault this long, then heal it (the command waits; Ctrl-C heals at once); 0 leaves it until 'redlab heal' or its dead-man switch")
	fs.DurationVar(&o.deadMan, "dead-man", 10*time.Minute, "with --hosts: a fault nobody heals heals itself this long after it started (timed faults: their length plus 30s)")
	fs.StringSliceVar(&o.from, "from", nil, "with --hosts, partition only: cut the hosts off from these hosts (inventory numbers, or IP addresses such as a replica's) instead of from the clients on the Redis port")
}

// hostsOrNodeArgs is nodeArgs(min, max) for the lab; with --hosts a fault
// takes one host or more (each gets it at once), heal none or more.
func hostsOrNodeArgs(o *faultHostsOptions, lo, hi int) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if o.file == "" {
			return nodeArgs(lo, hi)(c, args)
		}
		return nodeArgs(min(lo, 1), -1)(c, args)
	}
}

// hostsSession is the inventory and one SSH connection per chosen host.
type hostsSession struct {
	inv     *hosts.Inventory
	nums    []int
	clients []*remote.Client
}

// dialHosts loads the inventory and connects to hosts ns (all when none).
func dialHosts(ctx context.Context, e *env, o hostsOptions, ns []int) (*hostsSession, error) {
	inv, err := hosts.Load(o.file)
	if err != nil {
		return nil, &exitError{code: exitUsage, err: err}
	}
	if len(ns) == 0 {
		for i := range inv.Hosts {
			ns = append(ns, i+1)
		}
	}
	picked, err := inv.Pick(ns...)
	if err != nil {
		return nil, &exitError{code: exitUsage, err: err}
	}
	s := &hostsSession{inv: inv, nums: ns, clients: make([]*remote.Client, len(picked))}
	cfg := remote.Config{KnownHosts: inv.KnownHosts, InsecureIgnoreHostKey: o.insecure, Warn: e.stderr}
	errs := make([]error, len(picked))
	var wg sync.WaitGroup
	for i, h := range picked {
		wg.Go(func() { s.clients[i], errs[i] = remote.Dial(ctx, h, cfg) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *hostsSession) close() {
	for _, c := range s.clients {
		if c != nil {
			c.Close()
		}
	}
}

// each runs f on every chosen host at once and joins the errors.
func (s *hostsSession) each(f func(i int, c *remote.Client) error) error {
	errs := make([]error, len(s.clients))
	var wg sync.WaitGroup
	for i, c := range s.clients {
		wg.Go(func() { errs[i] = f(i, c) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// hostsParams are the SSH backend's parameters of a catalogue fault the
// catalogue accepted for a host over SSH.
func hostsParams(kind fault.Kind, params fault.Params) (hostfault.Params, error) {
	p := hostfault.Params{Delay: params.D("delay"), For: params.D(fault.For), Add: params.D("add"), Jitter: params.D("jitter"), By: params.D("by")}
	if kind == fault.Latency && p.Add == 0 {
		return p, errors.New("--add 0 with --hosts: heal the latency with 'redlab heal --hosts FILE N' instead")
	}
	return p, nil
}

// peerAddress reads one --from entry: a host number of the inventory (its
// Redis address's IP), or an IP address.
func peerAddress(inv *hosts.Inventory, s string) (string, error) {
	if n, err := strconv.Atoi(s); err == nil {
		hs, err := inv.Pick(n)
		if err != nil {
			return "", err
		}
		ip, _, _ := net.SplitHostPort(hs[0].Redis)
		if net.ParseIP(ip) == nil {
			return "", fmt.Errorf("--from %d: host %d's redis address %q is not an IP address, which iptables needs", n, n, hs[0].Redis)
		}
		return ip, nil
	}
	if net.ParseIP(s) == nil {
		return "", fmt.Errorf("--from %q: want a host number or an IP address", s)
	}
	return s, nil
}

// runHostsFault is `redlab fault KIND N... --hosts FILE`.
func runHostsFault(c *cobra.Command, e *env, d fault.Def, nodes []int, params fault.Params, o *faultOptions) error {
	if d.Kind == fault.Heal {
		return runHeal(c.Context(), e, o.hosts.hostsOptions, nodes, o.timeout)
	}
	if err := validate(d.Kind, params, fault.SSHHost, false); err != nil {
		return err
	}
	kind := string(d.Kind)
	p, err := hostsParams(d.Kind, params)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	ho := o.hosts
	if len(ho.from) > 0 && kind != "partition" {
		return usageErrorf("--from is for partition only")
	}
	if ho.hold < 0 || ho.deadMan <= 0 {
		return usageErrorf("--hold must be >= 0 and --dead-man > 0")
	}
	hold := ho.hold
	if kind == "pause" {
		if hold > 0 {
			return usageErrorf("pause takes --for, not --hold")
		}
		hold = p.For
	}
	if hold > 0 && p.For == 0 {
		p.For = hold
	}
	ctx, cancel := context.WithTimeout(c.Context(), o.timeout)
	defer cancel()
	ctx, cancelSig := cancelOnSignal(ctx, e)
	defer cancelSig()
	s, err := dialHosts(ctx, e, ho.hostsOptions, nodes)
	if err != nil {
		return err
	}
	defer s.close()
	for _, from := range ho.from {
		ip, err := peerAddress(s.inv, from)
		if err != nil {
			return &exitError{code: exitUsage, err: err}
		}
		p.Peers = append(p.Peers, ip)
	}
	faults := make([]hostfault.Fault, len(s.clients))
	err = s.each(func(i int, cl *remote.Client) error {
		f, err := hostfault.Inject(ctx, cl, hostfault.Fault{Kind: kind, Host: cl.Host()}, p, hostfault.Options{Horizon: ho.deadMan})
		faults[i] = f
		if err == nil {
			line := fmt.Sprintf("%s host %d (%s): fault %s injected", kind, s.nums[i], cl.Host().Label(s.nums[i]), f.ID)
			if f.DeadMan > 0 {
				line += fmt.Sprintf("; it heals itself at %s unless healed first", time.Now().Add(f.DeadMan).Format("15:04:05"))
			}
			fmt.Fprintln(e.stdout, line)
		}
		return err
	})
	if errors.Is(err, hostfault.ErrRefused) {
		return &exitError{code: exitUsage, err: err}
	}
	if err != nil || hold == 0 {
		return err
	}
	// Waiting for the heal: a signal heals at once.
	wctx, stop := cancelOnSignal(c.Context(), e)
	defer stop()
	select {
	case <-time.After(hold):
	case <-wctx.Done():
	}
	hctx, hcancel := context.WithTimeout(context.WithoutCancel(c.Context()), o.timeout)
	defer hcancel()
	return s.each(func(i int, cl *remote.Client) error {
		if faults[i].DeadMan == 0 {
			return nil
		}
		if err := hostfault.Heal(hctx, cl, faults[i]); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "%s host %d: fault %s healed\n", kind, s.nums[i], faults[i].ID)
		return nil
	})
}

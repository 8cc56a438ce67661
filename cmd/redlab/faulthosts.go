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

// loadHosts loads the inventory and checks hosts ns (all when none) are in
// it: usage errors, before any connection.
func loadHosts(o hostsOptions, ns []int) (*hosts.Inventory, []int, error) {
	inv, err := hosts.Load(o.file)
	if err != nil {
		return nil, nil, &exitError{code: exitUsage, err: err}
	}
	if len(ns) == 0 {
		for i := range inv.Hosts {
			ns = append(ns, i+1)
		}
	}
	if _, err := inv.Pick(ns...); err != nil {
		return nil, nil, &exitError{code: exitUsage, err: err}
	}
	return inv, ns, nil
}

// dialHosts connects to hosts ns of inv as a fault session (package
// hostfault) with so, its SSH settings from o.
func dialHosts(ctx context.Context, e *env, o hostsOptions, inv *hosts.Inventory, ns []int, so hostfault.SessionOptions) (*hostfault.Session, error) {
	so.Remote = remote.Config{KnownHosts: inv.KnownHosts, InsecureIgnoreHostKey: o.insecure, Warn: e.stderr}
	return hostfault.Dial(ctx, inv, ns, so)
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

// runHostsFault is `redlab fault KIND N... --hosts FILE`: each host gets the
// fault at once through an SSH fault session, which heals it after --hold
// (or a pause's --for) and otherwise leaves it to its dead-man switch.
func runHostsFault(c *cobra.Command, e *env, d fault.Def, nodes []int, params fault.Params, o *faultOptions) error {
	if d.Kind == fault.Heal {
		return runHeal(c.Context(), e, o.hosts.hostsOptions, nodes, o.timeout)
	}
	if err := validate(d.Kind, params, fault.SSHHost, false); err != nil {
		return err
	}
	if d.Kind == fault.Latency && params.D("add") == 0 {
		return usageErrorf("--add 0 with --hosts: heal the latency with 'redlab heal --hosts FILE N' instead")
	}
	ho := o.hosts
	if len(ho.from) > 0 && d.Kind != fault.Partition {
		return usageErrorf("--from is for partition only")
	}
	if ho.hold < 0 || ho.deadMan <= 0 {
		return usageErrorf("--hold must be >= 0 and --dead-man > 0")
	}
	hold := ho.hold
	if d.Kind == fault.Pause {
		if hold > 0 {
			return usageErrorf("pause takes --for, not --hold")
		}
		hold = params.D(fault.For)
	}
	inv, nodes, err := loadHosts(ho.hostsOptions, nodes)
	if err != nil {
		return err
	}
	var mu sync.Mutex // the hosts' lines, one at a time
	so := hostfault.SessionOptions{
		Options: hostfault.Options{Horizon: ho.deadMan},
		Healed: func(n int, f hostfault.Fault) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(e.stdout, "%s host %d: fault %s healed\n", f.Kind, n, f.ID)
		},
	}
	if hold > 0 && params.D(fault.For) == 0 {
		// Held for --hold: a switch that fires as a timed fault's would.
		so.Horizon = hold + hostfault.DefaultMargin
	}
	for _, from := range ho.from {
		ip, err := peerAddress(inv, from)
		if err != nil {
			return &exitError{code: exitUsage, err: err}
		}
		so.From = append(so.From, ip)
	}
	ctx, cancel := context.WithTimeout(c.Context(), o.timeout)
	defer cancel()
	ctx, cancelSig := cancelOnSignal(ctx, e)
	defer cancelSig()
	s, err := dialHosts(ctx, e, ho.hostsOptions, inv, nodes, so)
	if err != nil {
		return err
	}
	defer s.Close()
	err = s.Each(func(n int) error {
		res, err := s.Host(n).Apply(ctx, d.Kind, params)
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s host %d (%s): fault %s injected", d.Kind, n, inv.Hosts[n-1].Label(n), res.ID)
		if !res.HealsBy.IsZero() {
			line += fmt.Sprintf("; it heals itself at %s unless healed first", res.HealsBy.Format("15:04:05"))
		}
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintln(e.stdout, line)
		return nil
	})
	if errors.Is(err, hostfault.ErrRefused) {
		return &exitError{code: exitUsage, err: err}
	}
	if err != nil || hold == 0 {
		return err
	}
	// Holding: a signal heals at once.
	wctx, stop := cancelOnSignal(c.Context(), e)
	defer stop()
	return s.Hold(wctx, hold)
}

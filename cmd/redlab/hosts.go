package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/redlocklab/redlocklab/infra/hosts"
	"github.com/redlocklab/redlocklab/infra/lab"
)

// hostsFromTofuOptions are the flags of `redlab hosts from-tofu`.
type hostsFromTofuOptions struct {
	out string
	hosts.FromTofuOptions
}

func newHostsCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "hosts",
		Short: "the hosts inventory for drills and faults over SSH on real hosts",
		Long: `A hosts inventory lists real hosts (VMs, or the lab's machines) that
'redlab fault --hosts', 'redlab heal --hosts' and 'redlab drill --hosts' reach
over SSH: the SSH address, user, port and key, the Redis address clients use,
the host type (vm or machine) and the instance id. The format is documented in
package infra/hosts.`,
	}
	c.AddCommand(newHostsFromTofuCmd(e), newHostsCheckCmd(e), newHostsWeakenCmd(e), newHostsRestoreCmd(e))
	return c
}

func newHostsFromTofuCmd(e *env) *cobra.Command {
	o := &hostsFromTofuOptions{}
	c := &cobra.Command{
		Use:   "from-tofu DIR",
		Short: "write the inventory of the VMs an applied infra/envs/aws (DIR) made, from its outputs",
		Args:  cobra.ExactArgs(1),
	}
	fs := c.Flags()
	fs.StringVar(&o.out, "out", "", "the inventory file to write (default: stdout)")
	fs.BoolVar(&o.Public, "public", false, "SSH to the public addresses instead of the private ones")
	fs.StringVar(&o.Key, "key", "", "private key file for every host (default: the agent at SSH_AUTH_SOCK)")
	fs.StringVar(&o.KnownHosts, "known-hosts", "", "known_hosts file to check the host keys against (default: ~/.ssh/known_hosts)")
	fs.BoolVar(&o.DrillEnvironment, "drill-environment", false, "mark the hosts as a drill environment, which drills may weaken (appendfsync, restart delay); never for hosts that serve real locks")
	c.RunE = func(c *cobra.Command, args []string) error {
		dir := args[0]
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return usageErrorf("DIR %q: want the directory of the applied root module (infra/envs/aws)", dir)
		}
		bin, err := lab.FindTerraform()
		if err != nil {
			return err
		}
		tf, err := lab.NewTerraform(bin, dir, nil)
		if err != nil {
			return err
		}
		outputs, err := tf.Output(c.Context())
		if err != nil {
			return err
		}
		inv, err := hosts.FromOutputs(outputs, o.FromTofuOptions)
		if err != nil {
			return err
		}
		if o.out == "" {
			b, err := hosts.Marshal(inv)
			if err != nil {
				return err
			}
			_, err = e.stdout.Write(b)
			return err
		}
		if err := hosts.Write(o.out, inv); err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "wrote %d hosts to %s\n", len(inv.Hosts), o.out)
		return nil
	}
	return c
}

func newHostsCheckCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "check FILE",
		Short: "read an inventory strictly and list its hosts",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			inv, err := hosts.Load(args[0])
			if err != nil {
				return err
			}
			return printHosts(e.stdout, filepath.Base(args[0]), inv)
		},
	}
}

func printHosts(w io.Writer, name string, inv *hosts.Inventory) error {
	fmt.Fprintf(w, "%s: %d hosts, drill environment: %v\n", name, len(inv.Hosts), inv.DrillEnvironment)
	for i, h := range inv.Hosts {
		fmt.Fprintf(w, "%d\t%s\t%s@%s\t%s\tredis %s\n", i+1, h.Label(i+1), h.User, h.SSHAddress(), h.Type, h.Redis)
	}
	return nil
}

// The inventory of a deployment made with infra/envs/aws, from its outputs.

package hosts

import (
	"encoding/json"
	"fmt"
	"net"
	"sort"
	"strings"
)

// TofuOutputs are the outputs of infra/envs/aws that FromOutputs reads.
var TofuOutputs = []string{"private_addresses", "public_addresses", "instance_ids", "redlab_nodes", "ssh_user"}

// FromTofuOptions say what the outputs cannot: which address SSH uses and
// which key, and whether the deployment is a drill environment.
type FromTofuOptions struct {
	// Public makes SSH use the public addresses (for a control node outside
	// the VPC); the default is the private ones.
	Public bool
	// Key is the private key file for every host; empty: the SSH agent.
	Key string
	// KnownHosts is written into the file; empty: ~/.ssh/known_hosts.
	KnownHosts string
	// DrillEnvironment marks the inventory as one whose hosts may be
	// weakened for drills.
	DrillEnvironment bool
}

// ParseOutputJSON reads what `tofu output -json` (or terraform's) prints
// into each output's value.
func ParseOutputJSON(b []byte) (map[string]json.RawMessage, error) {
	var meta map[string]struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(b, &meta); err != nil {
		return nil, fmt.Errorf("hosts: tofu output -json: %w", err)
	}
	out := make(map[string]json.RawMessage, len(meta))
	for k, m := range meta {
		out[k] = m.Value
	}
	return out, nil
}

// FromOutputs builds the inventory of the VMs that infra/envs/aws made from
// its root module outputs (output name → JSON value).
func FromOutputs(outputs map[string]json.RawMessage, o FromTofuOptions) (*Inventory, error) {
	var missing []string
	for _, k := range TofuOutputs {
		if _, ok := outputs[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("hosts: the outputs lack %s: is this infra/envs/aws, applied with this version of the module?", strings.Join(missing, ", "))
	}
	var (
		private, public, ids []string
		publicIPs            []*string
		nodes, user          string
	)
	for _, d := range []struct {
		name string
		v    any
	}{{"private_addresses", &private}, {"public_addresses", &publicIPs}, {"instance_ids", &ids}, {"redlab_nodes", &nodes}, {"ssh_user", &user}} {
		if err := json.Unmarshal(outputs[d.name], d.v); err != nil {
			return nil, fmt.Errorf("hosts: output %s: %w", d.name, err)
		}
	}
	for _, p := range publicIPs {
		if p == nil {
			public = append(public, "")
		} else {
			public = append(public, *p)
		}
	}
	redis := strings.Split(nodes, ",")
	if nodes == "" {
		redis = nil
	}
	n := len(private)
	for _, c := range []struct {
		name string
		got  int
	}{{"public_addresses", len(public)}, {"instance_ids", len(ids)}, {"redlab_nodes", len(redis)}} {
		if c.got != n {
			return nil, fmt.Errorf("hosts: output %s has %d entries, private_addresses %d", c.name, c.got, n)
		}
	}
	if n == 0 {
		return nil, fmt.Errorf("hosts: the outputs list no node (private_addresses is empty)")
	}
	inv := &Inventory{DrillEnvironment: o.DrillEnvironment, KnownHosts: o.KnownHosts}
	for i := range n {
		addr := private[i]
		if o.Public {
			if public[i] == "" {
				return nil, fmt.Errorf("hosts: node %d has no public address (the module gives its VMs none): run from inside the VPC without --public", i+1)
			}
			addr = public[i]
		}
		if h, _, err := net.SplitHostPort(redis[i]); err != nil || h != private[i] {
			return nil, fmt.Errorf("hosts: redlab_nodes entry %d is %q, want %s:PORT (private_addresses in the same order)", i+1, redis[i], private[i])
		}
		inv.Hosts = append(inv.Hosts, Host{
			Name:       fmt.Sprintf("node-%d", i+1),
			Address:    addr,
			Redis:      redis[i],
			User:       user,
			Key:        o.Key,
			Type:       VM,
			InstanceID: ids[i],
		})
	}
	return inv, nil
}

package hosts_test

import (
	"fmt"

	"github.com/redlocklab/redlocklab/infra/hosts"
)

func Example() {
	inv, err := hosts.Parse("hosts.json", []byte(`{
  "drill_environment": true,
  "hosts": [
    {"address": "10.0.1.10", "redis": "10.0.1.10:6379", "user": "admin", "type": "vm"},
    {"address": "10.0.2.10", "redis": "10.0.2.10:6379", "user": "admin", "type": "vm", "port": 2222}
  ]
}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for i, h := range inv.Hosts {
		fmt.Println(h.Label(i+1), h.SSHAddress(), h.Redis)
	}
	_, err = hosts.Parse("hosts.json", []byte(`{"hosts": [{"address": "a", "redis": "a:6379", "user": "u", "type": "vm", "passwd": "x"}]}`))
	fmt.Println(err)
	// Output:
	// host-1 10.0.1.10:22 10.0.1.10:6379
	// host-2 10.0.2.10:2222 10.0.2.10:6379
	// hosts: hosts.json:1: hosts[0].passwd: unknown field (want one of address, redis, user, type, name, port, key, instance_id, own_netns)
}

package hostfault_test

import (
	"fmt"

	"github.com/redlocklab/redlocklab/infra/hostfault"
)

func ExampleRunbookBlock() {
	b, err := hostfault.RunbookBlock("pause")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(b)
	// Output:
	// # What `redlab fault pause --hosts` runs on each VM, as root (sudo -n).
	// # First it arms the dead-man switch, which heals the fault if nobody else does:
	// #   systemd-run --unit=redlab-heal-$ID --on-active=<length + 30s, or --dead-man> \
	// #     --timer-property=AccuracySec=100ms /bin/sh /run/redlab/faults/$ID.heal
	// # Inject:
	// systemctl kill -s SIGSTOP "$UNIT"
	// # Heal (at the end of --hold or --for, by redlab heal --hosts, or by the switch):
	// systemctl kill -s SIGCONT "$UNIT"
}

package lab_test

import (
	"context"
	"fmt"
	"github.com/redlocklab/redlocklab/infra/lab/profile"
	"log"
	"time"

	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/redlock"
)

// A drill: three nodes, one crash, one partition, the fault log, and down.
func Example() {
	ctx := context.Background()
	cfg := lab.Config{Profile: profile.Profile{Nodes: 3, RestartDelay: 10 * time.Second, PowerLoss: true}, StateDir: "/tmp/drill"}
	l, err := lab.Up(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer lab.Down(ctx, cfg)

	fmt.Println("REDLAB_NODES:", l.Addrs())
	// ACLs are on: lock clients log in as the redlock user.
	creds, err := l.Credentials()
	if err != nil {
		log.Fatal(err)
	}
	locks, err := redlock.New(redlock.NewNodes(l.Addrs(), redlock.WithAuth(creds.Redlock.Name, creds.Redlock.Password)))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	if _, err := l.Kill(ctx, 2); err != nil { // back after 10s
		log.Fatal(err)
	}
	if _, err := l.PowerLoss(ctx, 3); err != nil { // always: nothing acknowledged is lost
		log.Fatal(err)
	}
	if err := l.Partition(ctx, 3); err != nil {
		log.Fatal(err)
	}
	time.Sleep(5 * time.Second) // ... take locks with `locks` here ...
	if err := l.Heal(ctx); err != nil {
		log.Fatal(err)
	}
	faults, err := l.Faults() // read before Down: it removes the state directory
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range faults {
		fmt.Println(f.Node, f.Kind, f.Start, f.End)
	}
}

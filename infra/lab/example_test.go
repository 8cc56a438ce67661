package lab_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redlocklab/redlocklab/infra/lab"
)

func ExampleParsePersistence() {
	p, err := lab.ParsePersistence("everysec")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(p.KillNote())
	// Output: everysec: kill -9 keeps page-cache writes: always vs everysec indistinguishable; 'none' models key loss; power-loss cuts what everysec had not fsynced
}

func ExampleParsePersistenceList() {
	ps, err := lab.ParsePersistenceList("always,always,everysec,everysec,everysec")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(ps), ps[0], ps[4])
	// Output: 5 always everysec
}

// A drill: three nodes, one crash, one partition, the fault log, and down.
func Example() {
	ctx := context.Background()
	cfg := lab.Config{StateDir: "/tmp/drill", Count: 3, RestartDelay: 10 * time.Second}
	l, err := lab.Up(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer lab.Down(ctx, cfg)

	fmt.Println("REDLAB_NODES:", l.Addrs())
	if _, err := l.Kill(ctx, 2); err != nil { // back after 10s
		log.Fatal(err)
	}
	if err := l.Partition(ctx, 3); err != nil {
		log.Fatal(err)
	}
	time.Sleep(5 * time.Second) // ... run the load against the lab here ...
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

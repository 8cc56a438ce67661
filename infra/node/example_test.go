package node_test

import (
	"fmt"
	"log"

	"github.com/redlocklab/redlocklab/infra/node"
)

func ExampleParsePersistence() {
	p, err := node.ParsePersistence("everysec")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(p.KillNote())
	// Output: everysec: kill -9 keeps page-cache writes: always vs everysec indistinguishable; 'none' models key loss; power-loss cuts what everysec had not fsynced
}

func ExampleParsePersistenceList() {
	ps, err := node.ParsePersistenceList("always,always,everysec,everysec,everysec")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(ps), ps[0], ps[4])
	// Output: 5 always everysec
}

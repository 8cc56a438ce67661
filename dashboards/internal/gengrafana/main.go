// Command gengrafana writes the Grafana dashboards of package dashboards
// into dashboards/grafana (go generate ./dashboards). Run from the
// dashboards directory.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/redlocklab/redlocklab/dashboards"
)

func main() {
	files, err := dashboards.Grafana()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, f := range files {
		p := filepath.Join("grafana", f.Name)
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("wrote", p)
	}
}

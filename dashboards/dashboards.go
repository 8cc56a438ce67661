// Package dashboards holds the lab's observability as data: the Grafana
// dashboards (grafana/, with the provisioning file that points a stock
// Grafana at them) and the Prometheus alerting and recording rules
// (prometheus/, with their promtool unit tests). The rule files are
// embedded, so that `redlab lab up --monitoring` provisions them from the
// binary alone; the tests of this package check all of it (see README.md).
package dashboards

import (
	"embed"
	"io/fs"
	"path"
	"sort"
)

//go:embed prometheus/*.rules.yml
var rules embed.FS

// RuleFile is one Prometheus rule file.
type RuleFile struct {
	Name string // base name, e.g. redlock.rules.yml
	Data []byte
}

// RuleFiles returns the rule files in name order.
func RuleFiles() ([]RuleFile, error) {
	names, err := fs.Glob(rules, "prometheus/*.rules.yml")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	out := make([]RuleFile, 0, len(names))
	for _, n := range names {
		b, err := rules.ReadFile(n)
		if err != nil {
			return nil, err
		}
		out = append(out, RuleFile{Name: path.Base(n), Data: b})
	}
	return out, nil
}

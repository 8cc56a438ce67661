package drill

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/loadgen"
)

// PrometheusDir is where, in a drill's directory, a drill run with
// monitoring keeps its Prometheus data (PrometheusDir/data) and the
// configuration that serves it again afterwards (PrometheusDir/view.yml):
//
//	prometheus --config.file OUT/<drill>/prometheus/view.yml \
//	  --storage.tsdb.path OUT/<drill>/prometheus/data \
//	  --storage.tsdb.retention.time 3650d --web.listen-address 127.0.0.1:9090
//
// then point Grafana's Prometheus data source at it and the dashboards'
// time range at the drill (result.json has its start).
const PrometheusDir = "prometheus"

// viewConfig is a Prometheus configuration that scrapes and evaluates
// nothing: the drill's recorded series (rules included) are all there is.
const viewConfig = `# Serves the data a drill recorded; it scrapes and evaluates nothing.
# prometheus --config.file %[1]s/view.yml --storage.tsdb.path %[1]s/data \
#   --storage.tsdb.retention.time 3650d --web.listen-address 127.0.0.1:9090
# (a retention shorter than the data's age would delete it on start)
global:
  scrape_interval: 1m
`

// startMonitoring starts the lab's monitoring with its data under the
// drill's directory.
func startMonitoring(ctx context.Context, l *lab.Lab, cfg lab.MonitoringConfig, dir string, logf func(string, ...any)) error {
	pdir := filepath.Join(dir, PrometheusDir)
	cfg.DataDir = filepath.Join(pdir, "data")
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		return fmt.Errorf("drill: %w", err)
	}
	abs, err := filepath.Abs(pdir)
	if err != nil {
		return fmt.Errorf("drill: %w", err)
	}
	if err := os.WriteFile(filepath.Join(pdir, "view.yml"), []byte(fmt.Sprintf(viewConfig, abs)), 0o644); err != nil {
		return fmt.Errorf("drill: %w", err)
	}
	m, err := l.StartMonitoring(ctx, cfg)
	if err != nil {
		return err
	}
	logf("monitoring: Prometheus %s, data kept in %s", m.URL, cfg.DataDir)
	return nil
}

// serveMetrics serves reg (every guard's generator, service and lock
// client metrics, each labelled with its guard) on the loopback and
// registers it with the lab's Prometheus, labelled with the drill. stop
// first lets two more scrapes (of period scrape) pass, so that Prometheus
// records the final counts of the run.
func serveMetrics(ctx context.Context, reg *prometheus.Registry, stateDir, drillName string, scrape time.Duration) (stop func(), err error) {
	addr, stopServe, err := loadgen.ServeMetrics(ctx, "127.0.0.1:0", reg)
	if err != nil {
		return nil, err
	}
	unregister, err := lab.RegisterTarget(stateDir, lab.JobDrill, addr, map[string]string{"drill": strings.ReplaceAll(drillName, " ", "_")})
	if err != nil {
		stopServe()
		return nil, err
	}
	return func() {
		select {
		case <-time.After(2 * scrape):
		case <-ctx.Done():
		}
		unregister()
		stopServe()
	}, nil
}

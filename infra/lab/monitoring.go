package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/prometheus/common/model"

	"github.com/redlocklab/redlocklab/dashboards"
	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/internal/atomicfile"
	"github.com/redlocklab/redlocklab/internal/proc"
)

// Monitoring of a lab: one redis_exporter per node and a Prometheus that
// scrapes them, the node supervisors (redlab_lab_*, see package node, metrics.go) and
// any redlab serve, load or drill that registers its metrics endpoint
// (RegisterTarget), and evaluates the rules of dashboards/prometheus.
//
// Everything lives in stateDir/monitoring: the generated prometheus.yml,
// the rule files, the file_sd targets, the exporters' password file (mode
// 0600: the monitor user's password never reaches a command line), the
// processes' pid files and logs, and Prometheus's data unless
// MonitoringConfig.DataDir puts it elsewhere. The processes run detached,
// like the node supervisors, so they outlive `redlab lab up`; StopMonitoring
// (and Down) end them and remove the directory.
//
// Each exporter scrapes its node's redis-server on the private port, not
// through the fault proxy: like an exporter on the node's own VM, it keeps
// reporting the node while the network to it is faulted. Clients' view of
// a partition comes from the lock clients' per-node metrics.

// monitoringPortOffset is where the monitoring's ports start (the port
// layout is in layout.go).
const monitoringPortOffset = 500

// MonitoringPortOffsets are the monitoring's ports as PortOffsets gives
// ranges (one port per node, from 1): Prometheus's base+500 is the first
// port of the range at 499, the exporters' are the range at 500.
func MonitoringPortOffsets() []int { return []int{monitoringPortOffset - 1, monitoringPortOffset} }

// DefaultScrapeInterval is the lab's scrape and rule evaluation interval.
const DefaultScrapeInterval = 5 * time.Second

// Jobs under which a process registers its metrics endpoint with the lab's
// Prometheus (RegisterTarget).
const (
	JobServe = "redlab-serve"
	JobLoad  = "redlab-load"
	JobDrill = "redlab-drill"
)

// Jobs of the lab's own targets.
const (
	jobRedis = "redis"      // the exporters
	jobLab   = "redlab-lab" // the node supervisors
)

var registerJobs = []string{JobServe, JobLoad, JobDrill}

const (
	monitoringDirName = "monitoring"
	monitoringFile    = "monitoring.json"
	promConfigFile    = "prometheus.yml"
	exporterPassFile  = "exporter-passwords.json"
	rulesDirName      = "rules"
	targetsDirName    = "targets"
	promDataDirName   = "data"
)

// ErrNoMonitoring is returned when a lab runs without monitoring.
var ErrNoMonitoring = errors.New("lab: monitoring is not on (redlab lab up --monitoring)")

// MonitoringConfig configures StartMonitoring. Zero fields take defaults.
type MonitoringConfig struct {
	// ScrapeInterval is the scrape and rule evaluation interval (default
	// DefaultScrapeInterval).
	ScrapeInterval time.Duration
	// AlertForMax caps the `for:` of every alerting rule (0: as written).
	// For tests and demos, whose faults last seconds, not minutes.
	AlertForMax time.Duration
	// DataDir holds Prometheus's data (default stateDir/monitoring/data,
	// removed with the lab). Elsewhere, it outlives the lab: a drill keeps
	// its Prometheus data with its results.
	DataDir string
	// Prometheus and Exporter are the binaries (default prometheus and
	// prometheus-redis-exporter on PATH).
	Prometheus, Exporter string
}

// Monitoring is a lab's running monitoring, as recorded in
// stateDir/monitoring/monitoring.json.
type Monitoring struct {
	// URL is Prometheus's web address.
	URL            string     `json:"url"`
	PID            int        `json:"pid"`
	ScrapeInterval Duration   `json:"scrape_interval"`
	AlertForMax    Duration   `json:"alert_for_max,omitempty"`
	DataDir        string     `json:"data_dir"`
	Prometheus     string     `json:"prometheus"`
	Exporter       string     `json:"exporter"`
	Exporters      []Exporter `json:"exporters"`
}

// Exporter is one node's redis_exporter.
type Exporter struct {
	Node int    `json:"node"`
	Addr string `json:"addr"`
	PID  int    `json:"pid"`
}

// Config returns the configuration the monitoring was started with.
func (m *Monitoring) Config() MonitoringConfig {
	return MonitoringConfig{
		ScrapeInterval: time.Duration(m.ScrapeInterval), AlertForMax: time.Duration(m.AlertForMax),
		DataDir: m.DataDir, Prometheus: m.Prometheus, Exporter: m.Exporter,
	}
}

func monitoringDir(stateDir string) string { return filepath.Join(stateDir, monitoringDirName) }

// Monitoring returns the lab's running monitoring, or ErrNoMonitoring.
func (l *Lab) Monitoring() (*Monitoring, error) { return readMonitoring(l.stateDir) }

func readMonitoring(stateDir string) (*Monitoring, error) {
	var m Monitoring
	err := readJSONFile(filepath.Join(monitoringDir(stateDir), monitoringFile), &m)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoMonitoring
	}
	if err != nil {
		return nil, fmt.Errorf("lab: monitoring: %w", err)
	}
	return &m, nil
}

func (c MonitoringConfig) withDefaults(stateDir string) (MonitoringConfig, error) {
	if c.ScrapeInterval == 0 {
		c.ScrapeInterval = DefaultScrapeInterval
	}
	switch {
	case c.ScrapeInterval < 100*time.Millisecond || c.ScrapeInterval%time.Millisecond != 0:
		return c, fmt.Errorf("lab: scrape interval %v: want a whole number of milliseconds, at least 100ms", c.ScrapeInterval)
	case c.AlertForMax < 0 || c.AlertForMax%time.Millisecond != 0:
		return c, fmt.Errorf("lab: alert for-cap %v: want 0 or a whole number of milliseconds", c.AlertForMax)
	}
	if c.DataDir == "" {
		c.DataDir = filepath.Join(monitoringDir(stateDir), promDataDirName)
	}
	var err error
	if c.DataDir, err = filepath.Abs(c.DataDir); err != nil {
		return c, fmt.Errorf("lab: monitoring data dir: %w", err)
	}
	for _, b := range []struct {
		path *string
		def  string
	}{{&c.Prometheus, "prometheus"}, {&c.Exporter, "prometheus-redis-exporter"}} {
		if *b.path == "" {
			*b.path = b.def
		}
		if *b.path, err = exec.LookPath(*b.path); err != nil {
			return c, fmt.Errorf("lab: monitoring needs %s (Debian: apt-get install prometheus prometheus-redis-exporter): %w", b.def, err)
		}
	}
	return c, nil
}

// StartMonitoring starts the lab's monitoring, or brings the running one in
// line with cfg and the lab's nodes: it writes the Prometheus configuration
// and rules, starts an exporter for every node that has none, stops those
// of nodes the lab no longer has, and starts Prometheus (or makes the
// running one reload). It returns once Prometheus is ready.
func (l *Lab) StartMonitoring(ctx context.Context, cfg MonitoringConfig) (*Monitoring, error) {
	cfg, err := cfg.withDefaults(l.stateDir)
	if err != nil {
		return nil, err
	}
	base := l.f.BasePort
	if base+monitoringPortOffset+len(l.f.Endpoints) > 65535 {
		return nil, fmt.Errorf("lab: base port %d leaves no room for the monitoring ports (base+%d and up)", base, monitoringPortOffset)
	}
	dir := monitoringDir(l.stateDir)
	for _, d := range []string{dir, filepath.Join(dir, rulesDirName), filepath.Join(dir, targetsDirName), cfg.DataDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("lab: monitoring: %w", err)
		}
	}
	old, _ := readMonitoring(l.stateDir)
	if err := writeRules(filepath.Join(dir, rulesDirName), cfg.AlertForMax); err != nil {
		return nil, err
	}
	user, err := l.writeExporterPasswords(filepath.Join(dir, exporterPassFile))
	if err != nil {
		return nil, err
	}
	pruneTargets(filepath.Join(dir, targetsDirName))

	promAddr := "127.0.0.1:" + strconv.Itoa(base+monitoringPortOffset)
	m := &Monitoring{
		URL: "http://" + promAddr, ScrapeInterval: Duration(cfg.ScrapeInterval), AlertForMax: Duration(cfg.AlertForMax),
		DataDir: cfg.DataDir, Prometheus: cfg.Prometheus, Exporter: cfg.Exporter,
	}
	// Record what runs as it starts: a failure half-way still leaves what
	// StopMonitoring needs.
	save := func() error {
		if err := atomicfile.WriteJSON(filepath.Join(dir, monitoringFile), m, 0o644); err != nil {
			return fmt.Errorf("lab: monitoring: %w", err)
		}
		return nil
	}
	running := map[int]Exporter{}
	if old != nil {
		for _, e := range old.Exporters {
			if isOurs(e.PID, dir) {
				running[e.Node] = e
			}
		}
		m.PID = old.PID
	}
	for _, n := range l.f.Endpoints {
		e, ok := running[n.ID]
		delete(running, n.ID)
		if !ok {
			if e, err = startExporter(dir, cfg, n, base, user, l.TLSFiles().CA); err != nil {
				for _, r := range running {
					m.Exporters = append(m.Exporters, r)
				}
				_ = save()
				return nil, err
			}
		}
		m.Exporters = append(m.Exporters, e)
	}
	for _, e := range running { // nodes the lab no longer has
		stopProcess(ctx, e.PID, 10*time.Second)
	}

	conf, err := promConfig(l, cfg)
	if err != nil {
		return nil, err
	}
	confPath := filepath.Join(dir, promConfigFile)
	if err := atomicfile.WriteFile(confPath, conf, 0o644); err != nil {
		return nil, fmt.Errorf("lab: monitoring: %w", err)
	}
	switch {
	case isOurs(m.PID, dir) && old != nil && old.DataDir == cfg.DataDir:
		// Reload: the configuration or the rules may have changed.
		_ = syscall.Kill(m.PID, syscall.SIGHUP)
	default:
		if isOurs(m.PID, dir) { // a new data directory needs a new process
			stopProcess(ctx, m.PID, 30*time.Second)
		}
		if err := portFree(promAddr); err != nil {
			_ = save()
			return nil, fmt.Errorf("lab: Prometheus port: %w (choose another --base-port)", err)
		}
		m.PID, err = startDetached(dir, "prometheus.log", cfg.Prometheus, nil,
			"--config.file="+confPath,
			"--storage.tsdb.path="+cfg.DataDir,
			"--storage.tsdb.retention.time=3650d",
			"--web.listen-address="+promAddr,
		)
		if err != nil {
			_ = save()
			return nil, fmt.Errorf("lab: start Prometheus: %w", err)
		}
	}
	if err := save(); err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, m.URL+"/-/ready", m.PID, 90*time.Second); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
		return nil, fmt.Errorf("lab: Prometheus not ready: %w; end of its log:\n%s", err, tail(string(log), 1500))
	}
	for _, e := range m.Exporters {
		if err := waitHTTP(ctx, "http://"+e.Addr+"/metrics", e.PID, 30*time.Second); err != nil {
			log, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("exporter%d.log", e.Node)))
			return nil, fmt.Errorf("lab: node %d's exporter not answering: %w; end of its log:\n%s", e.Node, err, tail(string(log), 1500))
		}
	}
	return m, nil
}

// writeExporterPasswords writes redis_exporter's password file (a JSON map
// from each node's URI to the monitor user's password, mode 0600) and
// returns the user to log in as: the lab's monitor user, or none for a lab
// without ACLs.
func (l *Lab) writeExporterPasswords(path string) (string, error) {
	creds, err := l.Credentials()
	if errors.Is(err, node.ErrNoCredentials) {
		return "", atomicfile.WriteFile(path, []byte("{}\n"), 0o600)
	}
	if err != nil {
		return "", err
	}
	pw := map[string]string{}
	for _, n := range l.f.Endpoints {
		pw[exporterRedisURI(n.RedisAddr, l.f.TLS)] = creds.Monitor.Password
	}
	b, err := json.Marshal(pw)
	if err != nil {
		return "", err
	}
	if err := atomicfile.WriteFile(path, b, 0o600); err != nil {
		return "", fmt.Errorf("lab: monitoring: %w", err)
	}
	return creds.Monitor.Name, nil
}

// exporterRedisURI is the exporter's address of a node's redis-server, as
// its password file keys it: rediss:// for a TLS node.
func exporterRedisURI(redisAddr string, tls bool) string {
	if tls {
		return "rediss://" + redisAddr
	}
	return "redis://" + redisAddr
}

// ExporterArgs is the command line of node n's redis_exporter: config
// metrics on (appendfsync, maxmemory-policy, … as redis_config_key_value),
// its own Go metrics off, logged in as user with the password from
// passwordFile, answering on listen; with tlsCA, over TLS, verifying the
// node's certificate against that CA file. Tests run the real exporter
// with it.
func ExporterArgs(redisAddr, user, passwordFile, listen string, scrape time.Duration, tlsCA string) []string {
	args := []string{
		"-redis.addr", exporterRedisURI(redisAddr, tlsCA != ""),
		"-redis.password-file", passwordFile,
		"-include-config-metrics",
		"-redis-only-metrics",
		"-web.listen-address", listen,
		// A paused node accepts the connection and answers nothing: give
		// up within the scrape, so that Prometheus sees redis_up 0
		// instead of a scrape timeout.
		"-connection-timeout", (max(scrape/2, 250*time.Millisecond)).String(),
	}
	if user != "" {
		args = append(args, "-redis.user", user)
	}
	if tlsCA != "" {
		args = append(args, "-tls-ca-cert-file", tlsCA)
	}
	return args
}

func startExporter(dir string, cfg MonitoringConfig, n Node, base int, user, tlsCA string) (Exporter, error) {
	addr := "127.0.0.1:" + strconv.Itoa(base+monitoringPortOffset+n.ID)
	if err := portFree(addr); err != nil {
		return Exporter{}, fmt.Errorf("lab: node %d's exporter port: %w (choose another --base-port)", n.ID, err)
	}
	pid, err := startDetached(dir, fmt.Sprintf("exporter%d.log", n.ID), cfg.Exporter, nil,
		ExporterArgs(n.RedisAddr, user, filepath.Join(dir, exporterPassFile), addr, cfg.ScrapeInterval, tlsCA)...)
	if err != nil {
		return Exporter{}, fmt.Errorf("lab: start node %d's exporter: %w", n.ID, err)
	}
	return Exporter{Node: n.ID, Addr: addr, PID: pid}, nil
}

// startDetached starts bin in its own session (no terminal, no signal meant
// for the caller reaches it), in dir, with output appended to dir/logName,
// and returns its pid. It is not waited for: it outlives the caller.
func startDetached(dir, logName, bin string, env []string, args ...string) (int, error) {
	logf, err := os.OpenFile(filepath.Join(dir, logName), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	return pid, nil
}

// isOurs reports whether pid is a live process started for the monitoring
// in dir: its command line names a file there.
func isOurs(pid int, dir string) bool {
	if !proc.Alive(pid) {
		return false
	}
	for _, a := range proc.Cmdline(pid) {
		if strings.Contains(a, dir+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

func portFree(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return l.Close()
}

// waitHTTP polls url until it answers 200, the process pid exits, limit
// passes or ctx ends.
func waitHTTP(ctx context.Context, url string, pid int, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s: %s", url, resp.Status)
		}
		last = err
		if !proc.Alive(pid) {
			return fmt.Errorf("pid %d exited (last: %v)", pid, last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stopProcess sends SIGTERM (Prometheus then writes out its head block) and
// SIGKILL after limit; it returns once pid is gone.
func stopProcess(ctx context.Context, pid int, limit time.Duration) {
	if !proc.Alive(pid) {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	if !proc.WaitGone(ctx, pid, limit) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		proc.WaitGone(context.Background(), pid, 5*time.Second)
	}
}

// StopMonitoring ends the monitoring of the lab in stateDir (Prometheus and
// every exporter, also those whose pid file was lost) and removes
// stateDir/monitoring. A Prometheus data directory outside it is kept.
// Stopping monitoring that does not run succeeds.
func StopMonitoring(ctx context.Context, stateDir string) error {
	dir := monitoringDir(stateDir)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	m, err := readMonitoring(stateDir)
	if errors.Is(err, ErrNoMonitoring) && !fileExists(filepath.Join(dir, promConfigFile)) {
		return nil // not ours: a directory that happens to have the name
	}
	var pids []int
	if m != nil {
		for _, e := range m.Exporters {
			pids = append(pids, e.PID)
		}
		pids = append(pids, m.PID)
	}
	// Whatever else was started for this directory (a record lost half-way).
	pids = append(pids, proc.Scan(func(pid int) bool { return isOurs(pid, dir) && isMonitoringBinary(pid) })...)
	slices.Sort(pids)
	var wg sync.WaitGroup
	for _, pid := range slices.Compact(pids) {
		if !isOurs(pid, dir) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			stopProcess(ctx, pid, 30*time.Second)
		}()
	}
	wg.Wait()
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("lab: monitoring: %w", err)
	}
	return nil
}

// isMonitoringBinary reports whether pid runs prometheus or
// prometheus-redis-exporter (so that a pager that happens to name a file of
// the monitoring directory is left alone).
func isMonitoringBinary(pid int) bool {
	args := proc.Cmdline(pid)
	if len(args) == 0 {
		return false
	}
	base := filepath.Base(args[0])
	return base == "prometheus" || base == "prometheus-redis-exporter"
}

// RegisterTarget adds addr (host:port serving /metrics) to the lab's
// Prometheus under job (JobServe, JobLoad or JobDrill), with labels added
// to its series, until unregister is called (idempotent). It returns
// ErrNoMonitoring when the lab in stateDir has no monitoring. An address on
// every interface (":8080") is scraped on the loopback.
func RegisterTarget(stateDir, job, addr string, labels map[string]string) (unregister func(), err error) {
	if !slices.Contains(registerJobs, job) {
		return nil, fmt.Errorf("lab: register target: job %q: want one of %s", job, strings.Join(registerJobs, ", "))
	}
	if _, err := readMonitoring(stateDir); err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("lab: register target %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	target := net.JoinHostPort(host, port)
	path := filepath.Join(monitoringDir(stateDir), targetsDirName, fmt.Sprintf("%s-%d-%s.json", job, os.Getpid(), port))
	b, err := json.Marshal([]fileSDGroup{{Targets: []string{target}, Labels: labels}})
	if err != nil {
		return nil, err
	}
	if err := atomicfile.WriteFile(path, b, 0o644); err != nil {
		return nil, fmt.Errorf("lab: register target: %w", err)
	}
	var once sync.Once
	return func() { once.Do(func() { os.Remove(path) }) }, nil
}

// fileSDGroup is one entry of a Prometheus file_sd targets file.
type fileSDGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels,omitempty"`
}

// targetFile matches RegisterTarget's file names: JOB-PID-PORT.json.
var targetFile = regexp.MustCompile(`^(.+)-(\d+)-(\d+)\.json$`)

// pruneTargets removes the targets of processes that are gone.
func pruneTargets(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		m := targetFile.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		if pid, _ := strconv.Atoi(m[2]); !proc.Alive(pid) {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// The subset of Prometheus's configuration the lab writes.
type (
	promConf struct {
		Global        promGlobal     `yaml:"global"`
		RuleFiles     []string       `yaml:"rule_files"`
		ScrapeConfigs []scrapeConfig `yaml:"scrape_configs"`
	}
	promGlobal struct {
		ScrapeInterval     string `yaml:"scrape_interval"`
		ScrapeTimeout      string `yaml:"scrape_timeout"`
		EvaluationInterval string `yaml:"evaluation_interval"`
	}
	scrapeConfig struct {
		JobName       string         `yaml:"job_name"`
		StaticConfigs []staticConfig `yaml:"static_configs,omitempty"`
		FileSDConfigs []fileSDConfig `yaml:"file_sd_configs,omitempty"`
	}
	staticConfig struct {
		Targets []string          `yaml:"targets"`
		Labels  map[string]string `yaml:"labels,omitempty"`
	}
	fileSDConfig struct {
		Files           []string `yaml:"files"`
		RefreshInterval string   `yaml:"refresh_interval"`
	}
)

// promConfig renders prometheus.yml: the exporters (each labelled with its
// node's number), the supervisors (their metrics carry the node), and the
// registered targets of every job.
func promConfig(l *Lab, cfg MonitoringConfig) ([]byte, error) {
	interval := model.Duration(cfg.ScrapeInterval).String()
	timeout := model.Duration(min(cfg.ScrapeInterval, 10*time.Second)).String()
	c := promConf{
		Global:    promGlobal{ScrapeInterval: interval, ScrapeTimeout: timeout, EvaluationInterval: interval},
		RuleFiles: []string{filepath.Join(rulesDirName, "*.yml")},
	}
	redis := scrapeConfig{JobName: jobRedis}
	sup := scrapeConfig{JobName: jobLab}
	for _, n := range l.f.Endpoints {
		redis.StaticConfigs = append(redis.StaticConfigs, staticConfig{
			Targets: []string{"127.0.0.1:" + strconv.Itoa(l.f.BasePort+monitoringPortOffset+n.ID)},
			Labels:  map[string]string{"node": strconv.Itoa(n.ID)},
		})
		sup.StaticConfigs = append(sup.StaticConfigs, staticConfig{Targets: []string{n.Control}})
	}
	c.ScrapeConfigs = append(c.ScrapeConfigs, redis, sup)
	for _, job := range registerJobs {
		c.ScrapeConfigs = append(c.ScrapeConfigs, scrapeConfig{
			JobName: job,
			FileSDConfigs: []fileSDConfig{{
				Files: []string{filepath.Join(targetsDirName, job+"-*.json")}, RefreshInterval: interval,
			}},
		})
	}
	b, err := yaml.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("lab: monitoring: %w", err)
	}
	return append([]byte("# Written by redlab lab up --monitoring; regenerated on every lab up.\n"), b...), nil
}

// writeRules writes the rule files of package dashboards into dir (and
// removes any other *.yml there), with every alert's `for:` capped at
// forMax when it is not 0.
func writeRules(dir string, forMax time.Duration) error {
	files, err := dashboards.RuleFilesCapped(forMax)
	if err != nil {
		return fmt.Errorf("lab: rules: %w", err)
	}
	old, _ := filepath.Glob(filepath.Join(dir, "*.yml"))
	keep := map[string]bool{}
	for _, f := range files {
		if err := atomicfile.WriteFile(filepath.Join(dir, f.Name), f.Data, 0o644); err != nil {
			return fmt.Errorf("lab: rules: %w", err)
		}
		keep[filepath.Join(dir, f.Name)] = true
	}
	for _, p := range old {
		if !keep[p] {
			os.Remove(p)
		}
	}
	return nil
}

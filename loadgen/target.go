package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlocklab/redlocklab/inventory"
	"github.com/redlocklab/redlocklab/redlock"
)

// Op is one scheduled reservation.
type Op struct {
	Seq      uint64    // this shard's operation number, from 0
	Key      string    // the SKU
	Quantity int64     // units to reserve
	Intended time.Time // when the schedule wanted it sent
}

// Result is what a target reports about one operation. The lock timings are
// meaningful only when Lock is set (guards that take no lock leave it false).
type Result struct {
	Outcome  Outcome
	Lock     bool
	Acquire  time.Duration
	Hold     time.Duration
	Release  time.Duration
	Attempts int
}

// Target is where operations go: in-process inventory replicas, remote
// inventory instances over HTTP, or nothing at all (the no-op target that
// measures the generator itself). Do is called from many goroutines and must
// honour ctx.
type Target interface {
	Do(ctx context.Context, op Op) Result
	Close() error
}

// Preparer is implemented by targets that seed stock before a run.
type Preparer interface {
	Prepare(ctx context.Context, skus []string, stock int64) error
}

// SafetyChecker is implemented by targets that can judge safety: live double
// grants during the run and the full verdict after it.
type SafetyChecker interface {
	// DoubleGrants is the number of overlapping holds seen so far.
	DoubleGrants() int64
	// Safety audits the protected resource once the run has drained.
	Safety(ctx context.Context) (Safety, error)
}

// NoopTarget answers every operation at once with Reserved. It is the
// baseline for measuring the generator's own cost.
type NoopTarget struct{}

// Do returns Reserved without doing anything.
func (NoopTarget) Do(context.Context, Op) Result { return Result{Outcome: Reserved} }

// Close does nothing.
func (NoopTarget) Close() error { return nil }

var _ Target = NoopTarget{}

// InventoryConfig configures in-process replicas of the inventory service.
type InventoryConfig struct {
	// Nodes are the lock nodes (host:port); redis-single uses the first.
	Nodes []string
	Guard inventory.Guard
	// Replicas is the number of services, each with its own Redlock client,
	// node connection pools and store handle (default 1).
	Replicas int
	// StoreDSN is "sqlite:PATH" or a postgres:// URL.
	StoreDSN       string
	LockTTL        time.Duration // 0: the service default
	AcquireTimeout time.Duration // 0: the service default
	NodeTimeout    time.Duration // 0: the redlock default
	// LockConcurrency bounds the concurrent acquire attempts of each
	// replica's Redlock client (redlock.WithMaxConcurrentAttempts); 0:
	// unlimited.
	LockConcurrency int
	// PoolSize is each node client's pool size (0: go-redis default).
	PoolSize int
	// Username and Password authenticate to the lock nodes (Redis ACL).
	Username, Password string
	// Recorder receives every acquire attempt's per-node results.
	Recorder *Recorder
	// Hold is the time every reservation spends inside its critical section
	// (after the read, before the write); zero adds none.
	Hold HoldSpec
	// PauseHook, when set, runs inside every critical section (a fault hook),
	// after the hold.
	PauseHook inventory.PauseHook
	// OnHold, when set, receives every lock tenure as the hold checker does
	// (for a history kept outside the run). It is called concurrently and
	// must not block.
	OnHold func(Hold)
	// RunID prefixes request IDs so that runs never collide in the ledger.
	RunID string
}

// InventoryTarget is Replicas in-process inventory services sharing one
// store, reserving round-robin. It checks safety: holds are fed to a
// HoldChecker on one clock, and the store is audited after the run.
type InventoryTarget struct {
	cfg      InventoryConfig
	replicas []*inventory.Replica
	checker  atomic.Pointer[HoldChecker]
	skus     []string
	initial  map[string]int64
	locks    bool
}

var (
	_ Target        = (*InventoryTarget)(nil)
	_ Preparer      = (*InventoryTarget)(nil)
	_ SafetyChecker = (*InventoryTarget)(nil)
)

// NewInventoryTarget opens the replicas, each with its own store handle and
// lock clients.
func NewInventoryTarget(ctx context.Context, cfg InventoryConfig) (*InventoryTarget, error) {
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	if cfg.RunID == "" {
		cfg.RunID = fmt.Sprintf("load-%d", time.Now().UnixNano())
	}
	t := &InventoryTarget{cfg: cfg, locks: cfg.Guard.NeedsNodes()}
	t.checker.Store(NewHoldChecker(time.Now()))
	var observer redlock.Observer
	if cfg.Recorder != nil {
		observer = nodeObserver{cfg.Recorder}
	}
	for i := 0; i < cfg.Replicas; i++ {
		r, err := inventory.OpenReplica(ctx, inventory.ReplicaConfig{
			StoreDSN: cfg.StoreDSN, Guard: cfg.Guard, Nodes: cfg.Nodes,
			NodeTimeout: cfg.NodeTimeout, PoolSize: cfg.PoolSize, Username: cfg.Username, Password: cfg.Password,
			LockTTL: cfg.LockTTL, AcquireTimeout: cfg.AcquireTimeout, Holder: fmt.Sprintf("replica-%d", i),
			Observer: observer, MaxConcurrentAttempts: cfg.LockConcurrency,
			OnHold: t.observeHold, PauseHook: cfg.criticalSection(),
		})
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("loadgen: %w", err)
		}
		t.replicas = append(t.replicas, r)
	}
	t.warm(ctx)
	return t, nil
}

// nodeObserver turns the redlock client's acquire events into per-node
// SET latency and outcome counts.
type nodeObserver struct{ rec *Recorder }

func (o nodeObserver) Observe(e redlock.Event) {
	if e.Op != redlock.OpAcquire {
		return
	}
	var buf [16]NodeResult
	nr := buf[:0]
	for _, n := range e.Nodes {
		if n.Outcome < redlock.Granted || n.Outcome > redlock.Abandoned {
			continue
		}
		nr = append(nr, NodeResult{Node: n.Node, Outcome: NodeOutcome(n.Outcome - redlock.Granted), Latency: n.Latency})
	}
	o.rec.RecordNodes(nr)
}

// criticalSection is the hook run inside every critical section: the hold,
// then the fault hook; nil when there is neither.
func (cfg InventoryConfig) criticalSection() inventory.PauseHook {
	hold, pause := cfg.Hold, cfg.PauseHook
	switch {
	case hold.IsZero():
		return pause
	case pause == nil:
		return func(ctx context.Context, _ inventory.Request) { hold.Sleep(ctx) }
	}
	return func(ctx context.Context, req inventory.Request) {
		hold.Sleep(ctx)
		pause(ctx, req)
	}
}

func (t *InventoryTarget) observeHold(h inventory.Hold) {
	hold := Hold{Key: h.Key, Holder: h.Holder, Token: h.Token, Granted: h.Granted, Released: h.Released, ValidUntil: h.ValidUntil}
	t.checker.Load().Observe(hold)
	if t.cfg.OnHold != nil {
		t.cfg.OnHold(hold)
	}
}

// Begin starts a fresh double-grant check for a run starting at start.
func (t *InventoryTarget) Begin(start time.Time) { t.checker.Store(NewHoldChecker(start)) }

// Prepare seeds every SKU with stock (and clears its ledger).
func (t *InventoryTarget) Prepare(ctx context.Context, skus []string, stock int64) error {
	t.skus, t.initial = skus, make(map[string]int64, len(skus))
	for _, sku := range skus {
		if err := t.replicas[0].Store().Seed(ctx, sku, stock); err != nil {
			return err
		}
		t.initial[sku] = stock
	}
	return nil
}

// warmConns is how many connections per node and replica are opened before
// the run.
const warmConns = 4

// warm opens connections to every lock node before the clock starts, with a
// patience the measured requests do not get (see inventory.Replica.Warm).
func (t *InventoryTarget) warm(ctx context.Context) {
	var wg sync.WaitGroup
	for _, r := range t.replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.Warm(ctx, warmConns)
		}()
	}
	wg.Wait()
}

// Do reserves through the next replica.
func (t *InventoryTarget) Do(ctx context.Context, op Op) Result {
	svc := t.replicas[op.Seq%uint64(len(t.replicas))].Service()
	res, err := svc.Reserve(ctx, inventory.Request{
		SKU: op.Key, Quantity: op.Quantity, RequestID: t.cfg.RunID + "-" + strconv.FormatUint(op.Seq, 10),
	})
	timing := res.Timing
	var re *inventory.ReserveError
	if errors.As(err, &re) {
		timing = re.Timing
	}
	return Result{
		Outcome: classify(err), Lock: t.locks,
		Acquire: timing.Acquire, Hold: timing.Hold, Release: timing.Release, Attempts: timing.Attempts,
	}
}

func classify(err error) Outcome {
	switch {
	case err == nil:
		return Reserved
	case errors.Is(err, inventory.ErrOutOfStock):
		return OutOfStock
	case errors.Is(err, inventory.ErrContended):
		return Contended
	case errors.Is(err, inventory.ErrUnavailable):
		return Unavailable
	case errors.Is(err, inventory.ErrFenced):
		return Fenced
	}
	return Error
}

// DoubleGrants is the number of overlapping holds seen in this run.
func (t *InventoryTarget) DoubleGrants() int64 { return t.checker.Load().DoubleGrants() }

// Safety audits the store and reports the double grants.
func (t *InventoryTarget) Safety(ctx context.Context) (Safety, error) {
	s := Safety{DoubleGrantsChecked: t.locks}
	c := t.checker.Load()
	c.Flush()
	s.DoubleGrants, s.LockViolations, s.Examples = c.DoubleGrants(), c.LockViolations(), c.Examples()
	if len(t.skus) == 0 {
		return s, nil
	}
	a, err := t.replicas[0].Store().Audit(ctx, t.skus, t.initial)
	if err != nil {
		return s, err
	}
	s.AuditChecked = true
	s.LostUpdates, s.Oversell, s.FencedRejections = a.LostUpdates, a.Oversell, a.FencedRejections
	return s, nil
}

// Close closes every replica (each waits for its lock client's background
// releases before closing its connections).
func (t *InventoryTarget) Close() error {
	var errs []error
	for _, r := range t.replicas {
		errs = append(errs, r.Close())
	}
	t.replicas = nil
	return errors.Join(errs...)
}

// HTTPConfig configures remote inventory instances.
type HTTPConfig struct {
	// URLs are the instances' base URLs; operations go round-robin.
	URLs []string
	// Timeout bounds one request (default 30s).
	Timeout time.Duration
	// MaxConns is the connection pool per instance (default 1000).
	MaxConns int
	// StoreDSN, when set, is the instances' shared store: stock is seeded
	// and audited there directly. Without it stock is seeded through
	// PUT /v1/stock/{sku} and the store is not audited.
	StoreDSN string
}

// HTTPTarget sends reservations to remote inventory instances and reads the
// lock figures from their Server-Timing header.
type HTTPTarget struct {
	cfg     HTTPConfig
	client  *http.Client
	urls    []string
	guard   string
	locks   bool
	store   *inventory.Store
	skus    []string
	initial map[string]int64
	runID   string
}

var (
	_ Target        = (*HTTPTarget)(nil)
	_ Preparer      = (*HTTPTarget)(nil)
	_ SafetyChecker = (*HTTPTarget)(nil)
)

// NewHTTPTarget checks that every instance is ready (GET /readyz) and that
// they all run the same guard.
func NewHTTPTarget(ctx context.Context, cfg HTTPConfig) (*HTTPTarget, error) {
	if len(cfg.URLs) == 0 {
		return nil, errors.New("loadgen: no target URLs")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 1000
	}
	tr := &http.Transport{
		MaxIdleConns: cfg.MaxConns * len(cfg.URLs), MaxIdleConnsPerHost: cfg.MaxConns,
		IdleConnTimeout: 90 * time.Second, DisableCompression: true,
	}
	t := &HTTPTarget{cfg: cfg, client: &http.Client{Transport: tr, Timeout: cfg.Timeout}, runID: fmt.Sprintf("load-%d", time.Now().UnixNano())}
	for _, u := range cfg.URLs {
		u = strings.TrimRight(u, "/")
		t.urls = append(t.urls, u)
		guard, err := t.ready(ctx, u)
		if err != nil {
			t.Close()
			return nil, err
		}
		if t.guard != "" && guard != t.guard {
			t.Close()
			return nil, fmt.Errorf("loadgen: %s runs guard %s, %s runs %s: one run, one guard", t.urls[0], t.guard, u, guard)
		}
		t.guard = guard
	}
	g := inventory.Guard(t.guard)
	t.locks = g == inventory.GuardRedlock || g == inventory.GuardRedlockFenced || g == inventory.GuardRedisSingle
	if cfg.StoreDSN != "" {
		s, err := inventory.OpenStore(ctx, cfg.StoreDSN)
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("loadgen: open store: %w", err)
		}
		t.store = s
	}
	return t, nil
}

// Guard is the guard the remote instances run.
func (t *HTTPTarget) Guard() string { return t.guard }

func (t *HTTPTarget) ready(ctx context.Context, base string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
	if err != nil {
		return "", fmt.Errorf("loadgen: target %s: %w", base, err)
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("loadgen: target %s: %w", base, err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Guard  string `json:"guard"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&body); err != nil {
		return "", fmt.Errorf("loadgen: target %s/readyz: %w", base, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("loadgen: target %s is not ready: %s", base, body.Status)
	}
	return body.Guard, nil
}

// Prepare seeds stock in the shared store, or through the first instance.
func (t *HTTPTarget) Prepare(ctx context.Context, skus []string, stock int64) error {
	t.skus, t.initial = skus, make(map[string]int64, len(skus))
	for _, sku := range skus {
		t.initial[sku] = stock
		if t.store != nil {
			if err := t.store.Seed(ctx, sku, stock); err != nil {
				return err
			}
			continue
		}
		body := fmt.Sprintf(`{"stock":%d}`, stock)
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, t.urls[0]+"/v1/stock/"+sku, strings.NewReader(body))
		if err != nil {
			return fmt.Errorf("loadgen: seed %s: %w", sku, err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := t.client.Do(req)
		if err != nil {
			return fmt.Errorf("loadgen: seed %s: %w", sku, err)
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("loadgen: seed %s: %s answered %s", sku, t.urls[0], resp.Status)
		}
	}
	return nil
}

// Do posts one reservation.
func (t *HTTPTarget) Do(ctx context.Context, op Op) Result {
	base := t.urls[op.Seq%uint64(len(t.urls))]
	body := `{"sku":"` + op.Key + `","quantity":` + strconv.FormatInt(op.Quantity, 10) +
		`,"request_id":"` + t.runID + "-" + strconv.FormatUint(op.Seq, 10) + `"}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/reservations", strings.NewReader(body))
	if err != nil {
		return Result{Outcome: Error}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := t.client.Do(req)
	if err != nil {
		return Result{Outcome: Error}
	}
	defer resp.Body.Close()
	res := parseServerTiming(resp.Header.Get("Server-Timing"))
	res.Lock = t.locks
	switch {
	case resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated:
		res.Outcome = Reserved
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	case resp.StatusCode == http.StatusConflict:
		res.Outcome = OutOfStock
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	default:
		var e struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&e)
		switch e.Error.Code {
		case "contended":
			res.Outcome = Contended
		case "unavailable":
			res.Outcome = Unavailable
		case "fenced":
			res.Outcome = Fenced
		case "out_of_stock":
			res.Outcome = OutOfStock
		default:
			res.Outcome = Error
		}
	}
	return res
}

// parseServerTiming reads `acquire;dur=1.2, hold;dur=0.4, release;dur=0.3,
// attempts;desc="2"` (durations in ms).
func parseServerTiming(h string) Result {
	var r Result
	for _, metric := range strings.Split(h, ",") {
		parts := strings.Split(strings.TrimSpace(metric), ";")
		name := strings.TrimSpace(parts[0])
		for _, p := range parts[1:] {
			k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
			v = strings.Trim(v, `"`)
			switch {
			case k == "dur":
				f, err := strconv.ParseFloat(v, 64)
				if err != nil || f < 0 {
					continue
				}
				d := time.Duration(f * float64(time.Millisecond))
				switch name {
				case "acquire":
					r.Acquire = d
				case "hold":
					r.Hold = d
				case "release":
					r.Release = d
				}
			case k == "desc" && name == "attempts":
				if n, err := strconv.Atoi(v); err == nil {
					r.Attempts = n
				}
			}
		}
	}
	return r
}

// DoubleGrants is always 0: holds happen in the remote processes, on their
// clocks, and are not reported.
func (t *HTTPTarget) DoubleGrants() int64 { return 0 }

// Safety audits the shared store when there is one.
func (t *HTTPTarget) Safety(ctx context.Context) (Safety, error) {
	if t.store == nil || len(t.skus) == 0 {
		return Safety{}, nil
	}
	a, err := t.store.Audit(ctx, t.skus, t.initial)
	if err != nil {
		return Safety{}, err
	}
	return Safety{AuditChecked: true, LostUpdates: a.LostUpdates, Oversell: a.Oversell, FencedRejections: a.FencedRejections}, nil
}

// Close closes idle connections and the store.
func (t *HTTPTarget) Close() error {
	t.client.CloseIdleConnections()
	if t.store != nil {
		err := t.store.Close()
		t.store = nil
		return err
	}
	return nil
}

package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
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
	// Conflicts are the optimistic tries lost to a concurrent write
	// (db-version), whatever Lock says.
	Conflicts int
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
	// ReplicaConfig is what every replica is built from, as `redlab serve`
	// builds its one (package inventory owns its fields and defaults). The
	// target fills in, per replica, Holder ("replica-N") and Observer (the
	// Recorder's, when set), and wraps OnHold and PauseHook: every hold goes
	// to the target's hold checker first, then to OnHold (called
	// concurrently: it must not block); PauseHook runs after Hold inside
	// every critical section.
	inventory.ReplicaConfig
	// Replicas is the number of services, each with its own Redlock client,
	// node connection pools and store handle (default 1).
	Replicas int
	// Recorder receives every acquire attempt's per-node results.
	Recorder *Recorder
	// Hold is the time every reservation spends inside its critical section
	// (after the read, before the write); zero adds none.
	Hold HoldSpec
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
	t := &InventoryTarget{cfg: cfg, locks: cfg.Guard.TimesLock()}
	t.checker.Store(NewHoldChecker(time.Now()))
	var observer redlock.Observer
	if cfg.Recorder != nil {
		observer = nodeObserver{cfg.Recorder}
	}
	for i := 0; i < cfg.Replicas; i++ {
		rc := cfg.ReplicaConfig
		rc.Holder = fmt.Sprintf("replica-%d", i)
		rc.Observer = observer
		rc.OnHold = t.observeHold
		rc.PauseHook = cfg.criticalSection()
		r, err := inventory.OpenReplica(ctx, rc)
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
		if n.Err != nil {
			o.rec.RecordNodeError(n.Node, n.Err)
		}
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
	t.checker.Load().Observe(h)
	if t.cfg.OnHold != nil {
		t.cfg.OnHold(h)
	}
}

// Begin starts a fresh double-grant check for a run starting at start.
func (t *InventoryTarget) Begin(start time.Time) { t.checker.Store(NewHoldChecker(start)) }

// Prepare seeds every SKU with stock (and clears its ledger).
func (t *InventoryTarget) Prepare(ctx context.Context, skus []string, stock int64) error {
	t.skus, t.initial = skus, make(map[string]int64, len(skus))
	if err := t.replicas[0].Store().SeedMany(ctx, skus, stock); err != nil {
		return err
	}
	for _, sku := range skus {
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
		SKU: op.Key, Quantity: op.Quantity, RequestID: RequestID(t.cfg.RunID, op.Seq),
	})
	timing := res.Timing
	var re *inventory.ReserveError
	if errors.As(err, &re) {
		timing = re.Timing
	}
	return Result{
		Outcome: classify(err), Lock: t.locks,
		Acquire: timing.Acquire, Hold: timing.Hold, Release: timing.Release, Attempts: timing.Attempts, Conflicts: timing.Conflicts,
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
	case errors.Is(err, inventory.ErrOverloaded):
		return Overloaded
	case errors.Is(err, inventory.ErrFenced):
		return Fenced
	case errors.Is(err, inventory.ErrConflict):
		return Conflict
	}
	return Error
}

// DoubleGrants is the number of overlapping holds seen in this run.
func (t *InventoryTarget) DoubleGrants() int64 { return t.checker.Load().DoubleGrants() }

// LockViolations is the number of lock violations found so far.
func (t *InventoryTarget) LockViolations() int64 { return t.checker.Load().LockViolations() }

// Safety audits the store and reports the double grants.
func (t *InventoryTarget) Safety(ctx context.Context) (Safety, error) {
	s := Safety{DoubleGrantsChecked: t.cfg.Guard.Locks()}
	c := t.checker.Load()
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
	// RunID prefixes request IDs (RequestID); default one of its own.
	RunID string
}

// RequestID is the request ID of operation seq of run runID: what the
// targets send, and so what the ledger keeps of a committed reservation.
func RequestID(runID string, seq uint64) string { return runID + "-" + strconv.FormatUint(seq, 10) }

// HTTPTarget sends reservations to remote inventory instances through
// inventory.Client and reads the lock figures from their Server-Timing
// header. It tells apart a request that never arrived (Refused), one sent
// but never answered (Unknown: it may have committed) and an answer that is
// not the API's (HTTP4xx, HTTP5xx); with a store, the audit looks every
// Unknown one up in the ledger.
type HTTPTarget struct {
	cfg     HTTPConfig
	hc      *http.Client
	clients []*inventory.Client
	guard   string
	locks   bool
	store   *inventory.Store
	skus    []string
	initial map[string]int64
	runID   string

	mu      sync.Mutex
	unknown []uint64 // the Seq of every operation whose outcome is unknown
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
	t := &HTTPTarget{cfg: cfg, hc: &http.Client{Transport: tr, Timeout: cfg.Timeout}, runID: cfg.RunID}
	if t.runID == "" {
		t.runID = fmt.Sprintf("load-%d", time.Now().UnixNano())
	}
	for _, u := range cfg.URLs {
		c, err := inventory.NewClient(u, t.hc)
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("loadgen: target: %w", err)
		}
		st, err := c.Ready(ctx)
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("loadgen: target %s: %w", c.URL(), err)
		}
		if !st.Ready {
			t.Close()
			return nil, fmt.Errorf("loadgen: target %s is not ready (store: %s, lock: %s)", c.URL(), st.Store, st.Lock)
		}
		if t.guard != "" && string(st.Guard) != t.guard {
			t.Close()
			return nil, fmt.Errorf("loadgen: %s runs guard %s, %s runs %s: one run, one guard", t.clients[0].URL(), t.guard, c.URL(), st.Guard)
		}
		t.guard = string(st.Guard)
		t.clients = append(t.clients, c)
	}
	t.locks = inventory.Guard(t.guard).TimesLock()
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

// Prepare seeds stock in the shared store, or through the first instance.
func (t *HTTPTarget) Prepare(ctx context.Context, skus []string, stock int64) error {
	t.skus, t.initial = skus, make(map[string]int64, len(skus))
	for _, sku := range skus {
		t.initial[sku] = stock
	}
	if t.store != nil {
		return t.store.SeedMany(ctx, skus, stock)
	}
	for _, sku := range skus {
		if err := t.clients[0].SetStock(ctx, sku, stock); err != nil {
			return fmt.Errorf("loadgen: seed %s through %s: %w", sku, t.clients[0].URL(), err)
		}
	}
	return nil
}

func (t *HTTPTarget) requestID(seq uint64) string { return RequestID(t.runID, seq) }

// Do posts one reservation.
func (t *HTTPTarget) Do(ctx context.Context, op Op) Result {
	c := t.clients[op.Seq%uint64(len(t.clients))]
	res, err := c.Reserve(ctx, inventory.Request{SKU: op.Key, Quantity: op.Quantity, RequestID: t.requestID(op.Seq)})
	timing := res.Timing
	var re *inventory.ReserveError
	if errors.As(err, &re) {
		timing = re.Timing
	}
	out := classifyHTTP(err)
	if out == Unknown {
		t.mu.Lock()
		t.unknown = append(t.unknown, op.Seq)
		t.mu.Unlock()
	}
	return Result{
		// Only a reservation the service ran carries lock figures (a lock
		// guard makes at least one attempt); a refusal in transit or a
		// proxy's answer has none to record.
		Outcome: out, Lock: t.locks && timing.Attempts > 0,
		Acquire: timing.Acquire, Hold: timing.Hold, Release: timing.Release, Attempts: timing.Attempts, Conflicts: timing.Conflicts,
	}
}

// classifyHTTP maps a Client.Reserve result to its outcome.
func classifyHTTP(err error) Outcome {
	var ae *inventory.APIError
	switch {
	case errors.Is(err, inventory.ErrNotSent):
		return Refused
	case errors.Is(err, inventory.ErrOutcomeUnknown):
		return Unknown
	case errors.Is(err, inventory.ErrUnexpectedResponse) && errors.As(err, &ae):
		switch ae.Status / 100 {
		case 4:
			return HTTP4xx
		case 5:
			return HTTP5xx
		}
		return Error
	}
	return classify(err)
}

// DoubleGrants is always 0: holds happen in the remote processes, on their
// clocks, and are not reported.
func (t *HTTPTarget) DoubleGrants() int64 { return 0 }

// Safety audits the shared store when there is one, and looks up every
// operation whose outcome was unknown: did it commit?
func (t *HTTPTarget) Safety(ctx context.Context) (Safety, error) {
	if t.store == nil || len(t.skus) == 0 {
		return Safety{}, nil
	}
	a, err := t.store.Audit(ctx, t.skus, t.initial)
	if err != nil {
		return Safety{}, err
	}
	s := Safety{AuditChecked: true, LostUpdates: a.LostUpdates, Oversell: a.Oversell, FencedRejections: a.FencedRejections}
	t.mu.Lock()
	unknown := append([]uint64(nil), t.unknown...)
	t.mu.Unlock()
	for _, seq := range unknown {
		_, committed, err := t.store.Reservation(ctx, t.requestID(seq))
		if err != nil {
			return Safety{}, fmt.Errorf("loadgen: audit of the unknown outcomes: %w", err)
		}
		if committed {
			s.UnknownCommitted++
		} else {
			s.UnknownNotCommitted++
		}
	}
	return s, nil
}

// Close closes idle connections and the store.
func (t *HTTPTarget) Close() error {
	t.hc.CloseIdleConnections()
	if t.store != nil {
		err := t.store.Close()
		t.store = nil
		return err
	}
	return nil
}

package inventory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/internal/etcdtest"
)

func TestRequestValidate(t *testing.T) {
	ok := Request{SKU: "sku-1", Quantity: 1, RequestID: "r-1"}
	tests := []struct {
		name  string
		edit  func(*Request)
		field string // "" = valid
	}{
		{"valid", func(*Request) {}, ""},
		{"all sku characters", func(r *Request) { r.SKU = "Az09._:-" }, ""},
		{"max sku", func(r *Request) { r.SKU = strings.Repeat("s", MaxSKULen) }, ""},
		{"max quantity", func(r *Request) { r.Quantity = MaxQuantity }, ""},
		{"max request id", func(r *Request) { r.RequestID = strings.Repeat("r", MaxRequestIDLen) }, ""},
		{"empty sku", func(r *Request) { r.SKU = "" }, "sku"},
		{"long sku", func(r *Request) { r.SKU = strings.Repeat("s", MaxSKULen+1) }, "sku"},
		{"sku with space", func(r *Request) { r.SKU = "a b" }, "sku"},
		{"sku with slash", func(r *Request) { r.SKU = "a/b" }, "sku"},
		{"sku non-ascii", func(r *Request) { r.SKU = "é" }, "sku"},
		{"zero quantity", func(r *Request) { r.Quantity = 0 }, "quantity"},
		{"negative quantity", func(r *Request) { r.Quantity = -5 }, "quantity"},
		{"huge quantity", func(r *Request) { r.Quantity = MaxQuantity + 1 }, "quantity"},
		{"empty request id", func(r *Request) { r.RequestID = "" }, "request_id"},
		{"long request id", func(r *Request) { r.RequestID = strings.Repeat("r", MaxRequestIDLen+1) }, "request_id"},
		{"request id with space", func(r *Request) { r.RequestID = "a b" }, "request_id"},
		{"request id with control", func(r *Request) { r.RequestID = "a\nb" }, "request_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ok
			tt.edit(&r)
			err := r.Validate()
			var fe *fieldError
			switch {
			case tt.field == "" && err != nil:
				t.Errorf("got %v, want nil", err)
			case tt.field != "" && (!errors.Is(err, ErrInvalid) || !errors.As(err, &fe) || fe.field != tt.field):
				t.Errorf("got %v, want ErrInvalid on field %s", err, tt.field)
			}
		})
	}
}

func TestParseGuard(t *testing.T) {
	for _, g := range Guards() {
		if got, err := ParseGuard(string(g)); err != nil || got != g {
			t.Errorf("ParseGuard(%q) = %q, %v; want %q, nil", g, got, err, g)
		}
	}
	for _, s := range []string{"", "Redlock", "redlock-fenced-naive", "mutex"} {
		if _, err := ParseGuard(s); err == nil {
			t.Errorf("ParseGuard(%q): got nil, want an error", s)
		}
		if _, err := ParseAnyGuard(s); err == nil {
			t.Errorf("ParseAnyGuard(%q): got nil, want an error", s)
		}
	}
	if got, want := len(Guards()), 11; got != want {
		t.Errorf("len(Guards()): got %d, want %d", got, want)
	}
	// A comparison guard is named by the load generator and the drills,
	// never by a service: ParseGuard refuses it and says why.
	for _, g := range Comparisons() {
		_, err := ParseGuard(string(g))
		if !errors.Is(err, ErrComparisonGuard) || !strings.Contains(err.Error(), "DEL") {
			t.Errorf("ParseGuard(%q): got %v, want ErrComparisonGuard saying it releases with DEL", g, err)
		}
		if got, err := ParseAnyGuard(string(g)); err != nil || got != g {
			t.Errorf("ParseAnyGuard(%q) = %q, %v; want %q, nil", g, got, err, g)
		}
		if slices.Contains(Guards(), g) {
			t.Errorf("comparison guard %s is in Guards()", g)
		}
	}
	for _, g := range Guards() {
		if got, err := ParseAnyGuard(string(g)); err != nil || got != g {
			t.Errorf("ParseAnyGuard(%q) = %q, %v; want %q, nil", g, got, err, g)
		}
	}
}

func TestNewServiceValidates(t *testing.T) {
	s := openStore(t, "sqlite:"+t.TempDir()+"/inv.db")
	tests := []struct {
		name  string
		store *Store
		guard Guard
		opts  []ServiceOption
	}{
		{"nil store", nil, GuardNone, nil},
		{"unknown guard", s, "mutex", nil},
		{"redlock without client", s, GuardRedlock, nil},
		{"fenced without client", s, GuardRedlockFenced, nil},
		{"single without node", s, GuardRedisSingle, nil},
		{"redlock-del without client", s, GuardRedlockDel, nil},
		{"redsync without nodes", s, GuardRedsync, nil},
		{"etcd without client", s, GuardEtcd, nil},
		{"node-redlock without adapter", s, GuardNodeRedlock, nil},
		{"etcd-fenced without client", s, GuardEtcdFenced, nil},
		{"zero ttl", s, GuardNone, []ServiceOption{WithLockTTL(0)}},
		{"negative acquire timeout", s, GuardNone, []ServiceOption{WithAcquireTimeout(-time.Second)}},
	}
	for _, tt := range tests {
		if _, err := NewService(tt.store, tt.guard, nil, tt.opts...); err == nil {
			t.Errorf("%s: got nil error, want one", tt.name)
		}
	}
	svc, err := NewService(s, GuardDBAtomic, nil)
	if err != nil {
		t.Fatalf("NewService(db-atomic): %v", err)
	}
	if svc.Holder() == "" || svc.Guard() != GuardDBAtomic || svc.Store() != s {
		t.Errorf("accessors: got holder %q, guard %q", svc.Holder(), svc.Guard())
	}
}

// tally counts a concurrent run's outcomes.
type tally struct {
	mu                             sync.Mutex
	reserved, units, outOfStock    int64
	contended, unavailable, fenced int64
	// overloaded: turned away by the lock client's overload control, which
	// a starved machine engages; a refusal, like contended.
	overloaded int64
	// conflict: db-version ran out of tries (ErrConflict), a refusal too.
	conflict int64
	// tries and conflicts sum Timing.Attempts and Timing.Conflicts.
	tries, conflicts int64
	unexpected       []error
	holds            []Hold
}

func (tl *tally) add(r Reservation, err error) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	t := r.Timing
	var re *ReserveError
	if errors.As(err, &re) {
		t = re.Timing
	}
	tl.tries += int64(t.Attempts)
	tl.conflicts += int64(t.Conflicts)
	switch {
	case err == nil:
		tl.reserved++
		tl.units += r.Quantity
	case errors.Is(err, ErrOutOfStock):
		tl.outOfStock++
	case errors.Is(err, ErrContended):
		tl.contended++
	case errors.Is(err, ErrUnavailable):
		tl.unavailable++
	case errors.Is(err, ErrOverloaded):
		tl.overloaded++
	case errors.Is(err, ErrFenced):
		tl.fenced++
	case errors.Is(err, ErrConflict):
		tl.conflict++
	default:
		tl.unexpected = append(tl.unexpected, err)
	}
}

func (tl *tally) hold(h Hold) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.holds = append(tl.holds, h)
}

// hammer runs replicas×workers goroutines, each reserving perWorker times
// one unit of sku, every request with its own ID.
func hammer(t *testing.T, reps []*Service, workers, perWorker int, sku, run string) *tally {
	t.Helper()
	tl := &tally{}
	var wg sync.WaitGroup
	for ri, svc := range reps {
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < perWorker; i++ {
					req := Request{SKU: sku, Quantity: 1, RequestID: fmt.Sprintf("%s-r%d-w%d-%d", run, ri, w, i)}
					r, err := svc.Reserve(context.Background(), req)
					tl.add(r, err)
				}
			}()
		}
	}
	wg.Wait()
	for _, err := range tl.unexpected {
		t.Errorf("unexpected reserve error: %v", err)
	}
	return tl
}

// hammerHot is TestNoneLosesUpdates's load through guard g, without Redis:
// replicas×workers writers of one hot SKU seeded with initial, each
// reservation pausing 2 ms between its read and its write. It returns the
// callers' tally and the SKU's audit.
func hammerHot(t *testing.T, dsn string, g Guard, initial int64, replicas, workers, perWorker int, opts ...ServiceOption) (*tally, SKUAudit) {
	t.Helper()
	var reps []*Service
	for i := 0; i < replicas; i++ {
		reps = append(reps, replica(t, openStore(t, dsn), g, nil, append([]ServiceOption{WithHolder(fmt.Sprintf("replica-%d", i)),
			WithPauseHook(func(context.Context, Request) { time.Sleep(2 * time.Millisecond) })}, opts...)...))
	}
	sku := "hot-" + string(g)
	seed(t, reps[0].Store(), sku, initial)
	res := hammer(t, reps, workers, perWorker, sku, sku)
	return res, audit(t, reps[0].Store(), sku, initial)
}

// TestConservation: with a real lock (or the database deciding), many
// concurrent reservations across replicas conserve stock exactly and never
// oversell.
func TestConservation(t *testing.T) {
	cluster := startRedis(t, 3)
	const replicas, workers, perWorker = 3, 4, 5 // 60 requests
	const initial = 45                           // fewer than requested: out-of-stock must be hit exactly
	forEachStore(t, func(t *testing.T, dsn string) {
		for _, g := range []Guard{GuardRedlock, GuardRedlockFenced, GuardDBAtomic, GuardRedisSingle, GuardRedsync, GuardDBVersion, GuardDBForUpdate, GuardNodeRedlock} {
			t.Run(string(g), func(t *testing.T) {
				sku := "conserve-" + string(g)
				tl := &tally{}
				var reps []*Service
				for i := 0; i < replicas; i++ {
					st := openStore(t, dsn) // each replica its own pool, as separate processes
					reps = append(reps, replica(t, st, g, cluster,
						WithHolder(fmt.Sprintf("replica-%d", i)), WithAcquireTimeout(20*time.Second), WithHoldObserver(tl.hold)))
				}
				seed(t, reps[0].Store(), sku, initial)
				res := hammer(t, reps, workers, perWorker, sku, sku)
				a := checkConserved(t, reps[0].Store(), sku, initial, res)
				refused := res.contended + res.unavailable + res.overloaded + res.conflict
				if res.reserved == 0 {
					t.Errorf("nothing reserved (%d contended, %d unavailable, %d overloaded, %d conflict): conservation was not put to the test",
						res.contended, res.unavailable, res.overloaded, res.conflict)
				}
				if refused == 0 && (a.Final != 0 || res.reserved != initial || res.outOfStock != replicas*workers*perWorker-initial) {
					t.Errorf("got %d reserved, %d out of stock, final %d; want %d, %d, 0",
						res.reserved, res.outOfStock, a.Final, initial, replicas*workers*perWorker-initial)
				}
				if refused > 0 {
					t.Logf("%d contended, %d unavailable, %d overloaded, %d conflict (allowed; stock still conserved)",
						res.contended, res.unavailable, res.overloaded, res.conflict)
				}
				if g.NeedsNodes() {
					if len(tl.holds) == 0 {
						t.Errorf("no holds observed for a lock guard")
					}
					if dg := doubleGrants(tl.holds); dg > 0 {
						t.Errorf("double grants without faults: got %d, want 0", dg)
					}
				}
			})
		}
	})
}

// checkConserved audits sku after a run without faults: no drift, no
// oversell, the ledger is what the callers were told, no fenced rejection.
func checkConserved(t *testing.T, s *Store, sku string, initial int64, res *tally) SKUAudit {
	t.Helper()
	a := audit(t, s, sku, initial)
	if a.Drift != 0 || a.Final < 0 {
		t.Errorf("audit: got %+v, want drift 0 and final >= 0", a)
	}
	if a.Reserved != res.units || a.Reservations != res.reserved {
		t.Errorf("ledger: got %d units in %d rows, want %d in %d (what the callers were told)", a.Reserved, a.Reservations, res.units, res.reserved)
	}
	if a.FencedRejections != 0 || res.fenced != 0 {
		t.Errorf("fenced rejections without faults: got %d (callers saw %d), want 0", a.FencedRejections, res.fenced)
	}
	return a
}

// doubleGrants counts pairs of holds of one key whose intervals overlap.
func doubleGrants(holds []Hold) int { return overlaps(holds, false) }

// lockViolations counts the double grants whose overlap falls while both
// holders were still inside their validity.
func lockViolations(holds []Hold) int { return overlaps(holds, true) }

func overlaps(holds []Hold, withinValidity bool) int {
	n := 0
	for i := range holds {
		for j := i + 1; j < len(holds); j++ {
			a, b := holds[i], holds[j]
			if a.Key != b.Key {
				continue
			}
			start, end := a.Granted, a.Released
			ends := []time.Time{b.Released}
			if withinValidity {
				ends = append(ends, a.ValidUntil, b.ValidUntil)
			}
			if b.Granted.After(start) {
				start = b.Granted
			}
			for _, e := range ends {
				if e.Before(end) {
					end = e
				}
			}
			if start.Before(end) {
				n++
			}
		}
	}
	return n
}

// TestNoneLosesUpdates proves the checker can see a loss: without a lock,
// concurrent read-modify-writes overwrite each other. A tiny pause between
// read and write makes the overlap near-certain; a few rounds make it sure.
func TestNoneLosesUpdates(t *testing.T) {
	forEachStore(t, func(t *testing.T, dsn string) {
		const initial = 1000
		var reps []*Service
		for i := 0; i < 3; i++ {
			reps = append(reps, replica(t, openStore(t, dsn), GuardNone, nil,
				WithPauseHook(func(context.Context, Request) { time.Sleep(2 * time.Millisecond) })))
		}
		for round := 1; round <= 5; round++ {
			sku := fmt.Sprintf("none-%d", round)
			seed(t, reps[0].Store(), sku, initial)
			res := hammer(t, reps, 4, 5, sku, sku)
			a := audit(t, reps[0].Store(), sku, initial)
			if a.Reserved != res.units || a.Reservations != res.reserved {
				t.Fatalf("ledger: got %d units in %d rows, want %d in %d", a.Reserved, a.Reservations, res.units, res.reserved)
			}
			if a.Drift > 0 {
				t.Fatalf("drift %d > 0: stock fell more than the ledger says, which a blind write cannot do", a.Drift)
			}
			if a.Drift < 0 {
				t.Logf("round %d: %d reservations, stock %d -> %d: %d units lost", round, a.Reservations, initial, a.Final, -a.Drift)
				return
			}
		}
		t.Fatal("guard none lost no update in 5 rounds of 60 concurrent reservations: the checker (or the test) is broken")
	})
}

// TestPauseScenario is the process-pause scenario of the Redlock debate,
// made deterministic: holder A reads, then stops inside its critical section
// for longer than the lock's TTL; B acquires the expired lock; A resumes.
//
// "sequential": B reserves completely while A is paused.
// "interleaved": B reads while A is paused, then A writes, then B writes.
func TestPauseScenario(t *testing.T) {
	cluster := startRedis(t, 3)
	const ttl = 200 * time.Millisecond
	tests := []pauseCase{
		{GuardRedlock, "sequential", nil, 1, 0, 2},
		{GuardRedlock, "interleaved", nil, 1, 0, 2},
		{GuardRedlockFenced, "sequential", ErrFenced, 0, 1, 1},
		{GuardRedlockFenced, "interleaved", ErrFenced, 0, 1, 1},
		// Checking the token only when writing catches the first schedule
		// but not the second: B read before A wrote, and both tokens are
		// "newer" than what the row carried at each write.
		{guardRedlockFencedNaive, "sequential", ErrFenced, 0, 1, 1},
		{guardRedlockFencedNaive, "interleaved", nil, 1, 0, 2},
	}
	forEachStore(t, func(t *testing.T, dsn string) {
		for _, tt := range tests {
			t.Run(string(tt.guard)+"/"+tt.schedule, func(t *testing.T) {
				g := newGate(t)
				tl := &tally{}
				opts := []ServiceOption{WithLockTTL(ttl), WithAcquireTimeout(10 * time.Second), WithPauseHook(g.hook), WithHoldObserver(tl.hold)}
				a := replica(t, openStore(t, dsn), tt.guard, cluster, append(opts, WithHolder("A"))...)
				b := replica(t, openStore(t, dsn), tt.guard, cluster, append(opts, WithHolder("B"))...)
				// B's Acquire retries until A's lock expires on the nodes.
				tt.run(t, g, a, b)
				// The lock itself was granted twice at once: the pause is
				// invisible to a TTL lock, whatever the store does.
				if dg := doubleGrants(tl.holds); dg != 1 {
					t.Errorf("double grants: got %d, want 1 (A paused past its TTL while B held the lock)", dg)
				}
			})
		}
	})
}

// pauseCase is one row of a pause scenario: the guard, the schedule, and
// what A (the paused holder) gets, how many units are lost, how many stale
// writes the store rejects and how many reservations the ledger holds.
type pauseCase struct {
	guard       Guard
	schedule    string
	wantAErr    error
	wantLost    int64
	wantFenced  int64
	wantReserve int64
}

// run plays the schedule: A reserves and stops at the gate in its critical
// section; then, "sequential", B reserves completely while A is stopped, or,
// "interleaved", B reads while A is stopped, A writes, B writes. It checks
// what A and B got and audits the store.
func (tt pauseCase) run(t *testing.T, g *gate, a, b *Service) {
	t.Helper()
	sku := "pause-" + string(tt.guard) + "-" + tt.schedule
	seed(t, a.Store(), sku, 10)
	idA, idB := sku+"-a", sku+"-b"
	stepA := g.block(idA)
	resA := reserveAsync(a, Request{SKU: sku, Quantity: 1, RequestID: idA})
	stepA.wait(t, "A", resA)
	var resB result
	if tt.schedule == "sequential" {
		resB = await(t, reserveAsync(b, Request{SKU: sku, Quantity: 1, RequestID: idB}), "B")
		stepA.let()
		checkErr(t, "A", await(t, resA, "A").err, tt.wantAErr)
	} else {
		stepB := g.block(idB)
		chB := reserveAsync(b, Request{SKU: sku, Quantity: 1, RequestID: idB})
		stepB.wait(t, "B", chB)
		stepA.let()
		checkErr(t, "A", await(t, resA, "A").err, tt.wantAErr)
		stepB.let()
		resB = await(t, chB, "B")
	}
	if resB.err != nil {
		t.Errorf("B: got %v, want success", resB.err)
	}
	au := audit(t, a.Store(), sku, 10)
	if au.Drift != -tt.wantLost || au.FencedRejections != tt.wantFenced || au.Reservations != tt.wantReserve {
		t.Errorf("audit: got drift %d, %d fenced rejections, %d reservations; want drift %d, %d, %d",
			au.Drift, au.FencedRejections, au.Reservations, -tt.wantLost, tt.wantFenced, tt.wantReserve)
	}
}

func checkErr(t *testing.T, who string, got, want error) {
	t.Helper()
	if want == nil && got != nil || want != nil && !errors.Is(got, want) {
		t.Errorf("%s: got %v, want %v", who, got, want)
	}
	var re *ReserveError
	if got != nil && !errors.As(got, &re) {
		t.Errorf("%s: error %T is not a *ReserveError", who, got)
	}
}

// TestIdempotency: a request ID reserves once, whatever the guard, however
// often and however concurrently it is sent.
func TestIdempotency(t *testing.T) {
	cluster := startRedis(t, 3)
	etcd := etcdtest.Start(t, 1, etcdtest.Options{})
	forEachStore(t, func(t *testing.T, dsn string) {
		for _, g := range Guards() {
			t.Run(string(g), func(t *testing.T) {
				ctx := context.Background()
				newReplica := func() *Service {
					if g.NeedsEtcd() {
						return etcdReplica(t, openStore(t, dsn), g, etcd, WithAcquireTimeout(10*time.Second))
					}
					return replica(t, openStore(t, dsn), g, cluster, WithAcquireTimeout(10*time.Second))
				}
				svc, other := newReplica(), newReplica()
				sku := "idem-" + string(g)
				seed(t, svc.Store(), sku, 100)

				req := Request{SKU: sku, Quantity: 3, RequestID: "once-" + string(g)}
				first, err := svc.Reserve(ctx, req)
				if err != nil || first.Replayed {
					t.Fatalf("first Reserve: got %+v, %v; want a new reservation", first, err)
				}
				again, err := other.Reserve(ctx, req)
				if err != nil || !again.Replayed || again.ID != first.ID || !again.CreatedAt.Equal(first.CreatedAt) || again.Holder != first.Holder {
					t.Errorf("replay: got %+v, %v; want the original (ID %d) with Replayed", again, err, first.ID)
				}
				_, err = svc.Reserve(ctx, Request{SKU: sku, Quantity: 4, RequestID: req.RequestID})
				checkErr(t, "reuse with another quantity", err, ErrRequestIDReused)

				// Concurrent duplicates race past the pre-check; the unique
				// request_id still lets exactly one through.
				dup := Request{SKU: sku, Quantity: 1, RequestID: "dup-" + string(g)}
				var wg sync.WaitGroup
				var mu sync.Mutex
				var fresh, replayed int
				for i := 0; i < 8; i++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						s := svc
						if i%2 == 1 {
							s = other
						}
						r, err := s.Reserve(ctx, dup)
						mu.Lock()
						defer mu.Unlock()
						switch {
						case err != nil:
							t.Errorf("concurrent duplicate: %v", err)
						case r.Replayed:
							replayed++
						default:
							fresh++
						}
					}()
				}
				wg.Wait()
				if fresh != 1 || replayed != 7 {
					t.Errorf("8 concurrent duplicates: got %d fresh, %d replayed; want 1, 7", fresh, replayed)
				}
				if a := audit(t, svc.Store(), sku, 100); a.Final != 96 || a.Reservations != 2 || a.Drift != 0 {
					t.Errorf("audit: got %+v, want final 96 in 2 reservations", a)
				}
			})
		}
	})
}

// TestLockErrors: a held lock is "contended", too few nodes "unavailable";
// both carry the acquire timing.
func TestLockErrors(t *testing.T) {
	cluster := startRedis(t, 3)
	store := openStore(t, "sqlite:"+t.TempDir()+"/inv.db")
	seed(t, store, "held", 10)
	ctx := context.Background()

	for _, g := range []Guard{GuardRedlock, GuardRedlockFenced, GuardRedisSingle, GuardRedsync} {
		t.Run("contended/"+string(g), func(t *testing.T) {
			// Someone else holds the key on every node.
			for _, n := range cluster.Nodes {
				if err := n.Client().Set(ctx, lockKey("held"), "someone-else", 10*time.Second).Err(); err != nil {
					t.Fatal(err)
				}
			}
			t.Cleanup(func() {
				for _, n := range cluster.Nodes {
					n.Client().Del(context.Background(), lockKey("held"))
				}
			})
			svc := replica(t, store, g, cluster, WithAcquireTimeout(time.Second))
			_, err := svc.Reserve(ctx, Request{SKU: "held", Quantity: 1, RequestID: "c-" + string(g)})
			checkErr(t, "Reserve", err, ErrContended)
			var re *ReserveError
			if errors.As(err, &re) && (re.Timing.Attempts < 1 || re.Timing.Acquire <= 0) {
				t.Errorf("timing of a contended acquire: got %+v, want attempts >= 1 and a positive acquire time", re.Timing)
			}
		})
	}

	t.Run("unavailable", func(t *testing.T) {
		for _, g := range []Guard{GuardRedlock, GuardRedisSingle, GuardRedsync} {
			down := startRedis(t, 3)
			svc := replica(t, store, g, down, WithAcquireTimeout(300*time.Millisecond))
			down.Nodes[0].Kill()
			down.Nodes[1].Kill()
			_, err := svc.Reserve(ctx, Request{SKU: "held", Quantity: 1, RequestID: "u-" + string(g)})
			checkErr(t, string(g), err, ErrUnavailable)
			if rd := svc.Readiness(ctx); rd.Ready() || rd.Lock == nil || rd.Store != nil {
				t.Errorf("%s readiness with nodes down: got %+v, want store ok and lock failing", g, rd)
			}
		}
	})

	t.Run("ready", func(t *testing.T) {
		svc := replica(t, store, GuardRedlock, cluster)
		if rd := svc.Readiness(ctx); !rd.Ready() || rd.NodesUp != 3 || rd.Quorum != 2 {
			t.Errorf("readiness: got %+v, want ready with 3 up, quorum 2", rd)
		}
	})

	t.Run("canceled", func(t *testing.T) {
		svc := replica(t, store, GuardRedlock, cluster)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := svc.Reserve(cctx, Request{SKU: "held", Quantity: 1, RequestID: "x-canceled"})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("canceled context: got %v, want context.Canceled", err)
		}
	})
}

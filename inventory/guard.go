package inventory

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Guard is how a reservation's read-modify-write of the stock is protected.
type Guard string

// The guards, compared under the same faults.
const (
	// GuardNone reads the stock, computes and writes it back, with no lock:
	// the baseline that loses updates under contention.
	GuardNone Guard = "none"
	// GuardRedisSingle takes SET NX PX on one Redis node: an efficiency
	// lock, gone with its node.
	GuardRedisSingle Guard = "redis-single"
	// GuardRedlock is the classic design from the Redlock docs: acquire
	// lock:sku:<sku>, read, write, release in a deferred call. Safe only if
	// the critical section ends within the lock's validity.
	GuardRedlock Guard = "redlock"
	// GuardRedlockFenced is Redlock plus a fencing token from the store's
	// monotonic counter: the row is fenced before the read and the write
	// applies only if the row still carries the token, so a holder whose
	// lock expired under it cannot overwrite a newer holder's work.
	GuardRedlockFenced Guard = "redlock-fenced"
	// GuardDBAtomic lets the database decide: UPDATE … SET stock = stock − q
	// WHERE stock >= q, no lock at all.
	GuardDBAtomic Guard = "db-atomic"
	// GuardRedsync is the critical section of GuardRedlock through
	// go-redsync/redsync v4 as its users run it: its own defaults (8 s expiry
	// unless the service's TTL, 32 tries, 50–250 ms between them, no fail
	// fast) over plain go-redis clients with go-redis's default timeouts. It
	// is the "long timeout" client of the common mistakes.
	GuardRedsync Guard = "redsync"
	// GuardDBVersion is optimistic locking, JPA's @Version: read the stock
	// and the row's version, write only WHERE version is still the one
	// read (and bump it), retry a few times on a conflict, then
	// ErrConflict. No lock; the database decides.
	GuardDBVersion Guard = "db-version"
	// GuardDBForUpdate locks the row in the database: SELECT … FOR UPDATE
	// on PostgreSQL, then the write and the ledger row in that same
	// transaction. SQLite has no row locks: there the transaction's BEGIN
	// IMMEDIATE locks the whole database for writes, so one SKU's holder
	// blocks every other SKU's writer too.
	GuardDBForUpdate Guard = "db-for-update"
	// GuardEtcd is the critical section of GuardRedlock under etcd's own
	// lock, go.etcd.io/etcd/client/v3/concurrency's Mutex on
	// /redlab/lock/sku/<sku>: a lock from a consensus store, held by a
	// lease the client keeps alive, and still no fence. A holder that stops
	// (a process pause) outlives its lease like any TTL lock's holder.
	GuardEtcd Guard = "etcd"
	// GuardEtcdFenced is GuardEtcd plus the fencing token the seed article
	// names: the lock key's create revision, which grows with every new
	// holder of the key. The row is fenced with it before the read, in a
	// column of its own (etcd_fence), and the write applies only while the
	// row still carries it.
	GuardEtcdFenced Guard = "etcd-fenced"

	// GuardNodeRedlock is the critical section of GuardRedlock under a lock
	// client nobody here wrote: node-redlock (npm redlock) over node redis,
	// as its README sets them up, with its own defaults (10 retries 200 ms
	// ± 100 ms apart, drift factor 0.01, no command timeout), run as an
	// adapter speaking the foreign lock client protocol
	// (inventory/foreign/README.md). Its holds are timed on this process's
	// clock, its validity as the client claimed it.
	GuardNodeRedlock Guard = "node-redlock"

	// GuardRedlockDel is GuardRedlock released with a plain DEL of the key,
	// without checking that the key still holds this holder's token: the
	// mistake the Redlock docs warn against. A holder whose lock expired
	// deletes the next holder's key and lets a third one in. It exists to
	// be compared with GuardRedlock (Comparisons), never to protect
	// anything: ParseGuard, and so `redlab serve`, refuse it.
	GuardRedlockDel Guard = "redlock-del"

	// GuardNodeRedlockDel is GuardNodeRedlock whose adapter releases with a
	// plain DEL of the key on every node instead of node-redlock's
	// token-checking unlock: GuardRedlockDel's mistake in a foreign
	// client, a comparison guard like it.
	GuardNodeRedlockDel Guard = "node-redlock-del"

	// guardRedlockFencedNaive checks the token only at write time
	// (last_fence <= t, then last_fence = t). It is here to show that this
	// still loses updates in a read-modify-write when two holders overlap;
	// it is deliberately absent from Guards and ParseGuard.
	guardRedlockFencedNaive Guard = "redlock-fenced-naive"
)

// guard is how one Guard protects a reservation. Each guard is one type in
// a file of its own (guard_*.go) and one row of guardTable; the Service
// validates the request, answers replays and records metrics around it.
type guard interface {
	// reserve makes one reservation: take the lock (if any), run the
	// critical section, release. It reports what the lock cost in Timing.
	reserve(ctx context.Context, req Request) (Reservation, Timing, error)
	// ready reports the lock's dependencies as /readyz shows them: how
	// many answered, how many are needed (both 0 without a lock), and why
	// the lock cannot be taken now (nil when it can).
	ready(ctx context.Context) (up, quorum int, err error)
}

// guardUse says who may run a guard.
type guardUse uint8

const (
	// useService: a service can be started with it (Guards, ParseGuard).
	useService guardUse = iota
	// useComparison: a mistake shown beside the right practice, run by the
	// load generator and the drills only (Comparisons, ParseAnyGuard).
	useComparison
	// useHidden: the package's own tests only.
	useHidden
)

// guardEntry is one guard's row: who may run it, what it needs, and how
// it is built for a Service.
type guardEntry struct {
	name Guard
	use  guardUse
	// redisNodes: the guard locks on Redis nodes (NeedsNodes).
	redisNodes bool
	// redlock: the guard locks with this repository's Redlock client, whose
	// observer sees every node's reply (TimesNodes).
	redlock bool
	// dbLock: the guard's lock, or its retries, are the database's
	// (Locks without NeedsNodes).
	dbLock bool
	// etcd: the guard locks on an etcd cluster (NeedsEtcd).
	etcd bool
	// foreign: the guard's lock is a foreign client's, run as an adapter
	// (guard_foreign.go).
	foreign bool
	// fence: the row's column the guard fences with, "" for none. Tokens
	// from different sources live in different columns and are never
	// compared with each other.
	fence fenceColumn
	// build returns the guard for s, or why s lacks what it needs.
	build func(s *Service) (guard, error)
}

// guardTable is the catalogue of guards, in the order they are listed.
var guardTable = []guardEntry{
	{name: GuardNone, build: newNoneGuard},
	{name: GuardRedisSingle, redisNodes: true, build: newSingleGuard},
	{name: GuardRedlock, redisNodes: true, redlock: true, build: newRedlockGuard},
	{name: GuardRedlockFenced, redisNodes: true, redlock: true, fence: fenceStore, build: newRedlockFencedGuard},
	{name: GuardDBAtomic, build: newDBAtomicGuard},
	{name: GuardRedsync, redisNodes: true, build: newRedsyncGuard},
	{name: GuardDBVersion, dbLock: true, build: newDBVersionGuard},
	{name: GuardDBForUpdate, dbLock: true, build: newDBForUpdateGuard},
	{name: GuardEtcd, etcd: true, build: newEtcdGuard},
	{name: GuardEtcdFenced, etcd: true, fence: fenceEtcd, build: newEtcdFencedGuard},
	{name: GuardNodeRedlock, redisNodes: true, foreign: true, build: foreignGuardOf(nodeRedlockAdapter)},
	{name: GuardRedlockDel, use: useComparison, redisNodes: true, redlock: true, build: newRedlockGuard},
	{name: GuardNodeRedlockDel, use: useComparison, redisNodes: true, foreign: true, build: foreignGuardOf(nodeRedlockDelAdapter)},
	{name: guardRedlockFencedNaive, use: useHidden, redisNodes: true, redlock: true, fence: fenceStore, build: newRedlockFencedGuard},
}

func (g Guard) entry() (guardEntry, bool) {
	for _, e := range guardTable {
		if e.name == g {
			return e, true
		}
	}
	return guardEntry{}, false
}

func guardsFor(use guardUse) []Guard {
	var out []Guard
	for _, e := range guardTable {
		if e.use == use {
			out = append(out, e.name)
		}
	}
	return out
}

// Guards lists the guards a service can be started with.
func Guards() []Guard { return guardsFor(useService) }

// Comparisons lists the guards that exist only to show a mistake side by
// side with the right practice: the load generator and the drills run
// them, a service never does (ParseGuard refuses them).
func Comparisons() []Guard { return guardsFor(useComparison) }

// ErrComparisonGuard is returned by ParseGuard for a guard of Comparisons.
var ErrComparisonGuard = errors.New("inventory: comparison guard")

// ParseGuard returns the guard named s, one of Guards: what a service can
// be started with. A guard of Comparisons is refused with
// ErrComparisonGuard, saying why.
func ParseGuard(s string) (Guard, error) {
	for _, g := range Guards() {
		if string(g) == s {
			return g, nil
		}
	}
	for _, g := range Comparisons() {
		if string(g) == s {
			return "", fmt.Errorf("%w: %s releases its lock with a plain DEL, the mistake it exists to show; "+
				"`redlab load` and the drills run it next to redlock, a service never does", ErrComparisonGuard, g)
		}
	}
	return "", fmt.Errorf("inventory: unknown guard %q (want one of %s)", s, JoinGuards(Guards()))
}

// ParseAnyGuard returns the guard named s, one of Guards or Comparisons:
// what the load generator and the drills accept.
func ParseAnyGuard(s string) (Guard, error) {
	for _, g := range Comparisons() {
		if string(g) == s {
			return g, nil
		}
	}
	g, err := ParseGuard(s)
	if err != nil {
		return "", fmt.Errorf("inventory: unknown guard %q (want one of %s)", s, JoinGuards(append(Guards(), Comparisons()...)))
	}
	return g, nil
}

// JoinGuards lists guards by name, comma-separated, for messages and help.
func JoinGuards(gs []Guard) string {
	names := make([]string, len(gs))
	for i, g := range gs {
		names[i] = string(g)
	}
	return strings.Join(names, ", ")
}

func (g Guard) known() bool {
	_, ok := g.entry()
	return ok
}

// NeedsNodes reports whether the guard takes a lock on Redis nodes (and so
// needs lock nodes to run).
func (g Guard) NeedsNodes() bool {
	e, _ := g.entry()
	return e.redisNodes
}

// NeedsEtcd reports whether the guard takes its lock on an etcd cluster
// (and so needs etcd endpoints to run).
func (g Guard) NeedsEtcd() bool {
	e, _ := g.entry()
	return e.etcd
}

// Locks reports whether the guard takes a lock at all, on Redis nodes or
// on etcd: whether it has lock holds, a lock TTL and lock readiness.
func (g Guard) Locks() bool {
	e, _ := g.entry()
	return e.redisNodes || e.etcd
}

// TimesLock reports whether the guard reports a lock's cost in Timing
// (Acquire, Hold, Attempts): the guards that Lock, the database's row lock
// (GuardDBForUpdate), and the optimistic guard, whose tries are its
// attempts (GuardDBVersion). The others report only Hold.
func (g Guard) TimesLock() bool {
	e, _ := g.entry()
	return g.Locks() || e.dbLock
}

// CheckTTL reports whether the guard can hold a lock for ttl: positive,
// and for the etcd guards at least etcd's minimum lease TTL (see
// MinEtcdLockTTL).
func (g Guard) CheckTTL(ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("inventory: lock TTL must be positive, got %v", ttl)
	}
	if g.NeedsEtcd() && ttl < MinEtcdLockTTL {
		return fmt.Errorf("inventory: guard %s: lock TTL %v is below etcd's minimum lease TTL of %v "+
			"(an etcd server with default flags grants no lease shorter, and TTLs are whole seconds: longer ones are rounded up)",
			g, ttl, MinEtcdLockTTL)
	}
	return nil
}

// fenceColumn is the row's column the guard's fencing tokens go to.
func (g Guard) fenceColumn() fenceColumn {
	e, _ := g.entry()
	return e.fence
}

// TimesNodes reports whether the guard reports each lock node's reply (the
// guards built on this repository's Redlock client, whose observer sees
// every node's answer).
func (g Guard) TimesNodes() bool { return g.redlock() }

// redlock reports whether the guard takes a lock with this repository's
// Redlock client.
func (g Guard) redlock() bool {
	e, _ := g.entry()
	return e.redlock
}

// foreign reports whether the guard's lock is a foreign client's, run as
// an adapter (and so whether it needs the adapter, not node clients).
func (g Guard) foreign() bool {
	e, _ := g.entry()
	return e.foreign
}

// lockKey is the lock's Redis key for a SKU.
func lockKey(sku string) string { return "lock:sku:" + sku }

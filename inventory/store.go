package inventory

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // registers the "sqlite" database/sql driver

	"github.com/redlocklab/redlocklab/internal/flock"
	"github.com/redlocklab/redlocklab/inventory/internal/wire"
)

//go:embed migrations
var migrationFS embed.FS

// migrationLockID is the Postgres advisory lock key that serialises
// migrations of replicas starting at the same time ("redlab" in ASCII).
const migrationLockID = 0x7265646c6162

// sqlitePragmas make every SQLite connection a good citizen among concurrent
// writers: WAL so readers never block the writer, a busy timeout so a writer
// waits for the lock instead of failing, and BEGIN IMMEDIATE so a transaction
// takes the write lock up front (a deferred one that later upgrades can fail
// with SQLITE_BUSY without waiting).
const sqlitePragmas = "_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate"

type dialect string

const (
	dialectSQLite   dialect = "sqlite"
	dialectPostgres dialect = "postgres"
)

// Store is the inventory database: stock per SKU, the reservation ledger and
// the fencing token counter. It is safe for concurrent use, and several
// Stores (in one process or many) may share one database.
type Store struct {
	db      *sql.DB
	dialect dialect
	stmts   sync.Map // query text -> *sql.Stmt (see stmt)

	closeOnce sync.Once
	closeErr  error
}

// CheckDSN reports whether OpenStore would accept dsn's form, without
// touching the database: "sqlite:PATH" or "postgres://…" ("postgresql://").
func CheckDSN(dsn string) error {
	_, _, err := parseDSN(dsn)
	return err
}

func parseDSN(dsn string) (dialect, string, error) {
	switch {
	case strings.HasPrefix(dsn, "sqlite:"):
		path, query, _ := strings.Cut(strings.TrimPrefix(dsn, "sqlite:"), "?")
		if path == "" {
			return "", "", fmt.Errorf("inventory: store %q: want sqlite:PATH", dsn)
		}
		if path == ":memory:" || strings.Contains(path, "mode=memory") {
			return "", "", fmt.Errorf("inventory: store %q: in-memory SQLite is per connection; use a file", dsn)
		}
		source := path + "?" + sqlitePragmas
		if query != "" {
			source += "&" + query
		}
		return dialectSQLite, source, nil
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		if _, err := url.Parse(dsn); err != nil {
			return "", "", fmt.Errorf("inventory: store: bad postgres URL: %w", err)
		}
		return dialectPostgres, dsn, nil
	default:
		return "", "", fmt.Errorf("inventory: store %q: want sqlite:PATH or postgres://…", RedactDSN(dsn))
	}
}

// RedactDSN returns dsn with any password replaced, for logs.
func RedactDSN(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		return u.Redacted()
	}
	return dsn
}

// OpenStore connects to dsn — "sqlite:PATH" (a file, in WAL mode; its
// directory is created) or "postgres://…" — and applies the migrations,
// which is idempotent and safe when several replicas start at once.
func OpenStore(ctx context.Context, dsn string) (*Store, error) {
	d, source, err := parseDSN(dsn)
	if err != nil {
		return nil, err
	}
	driver := "pgx"
	if d == dialectSQLite {
		driver = "sqlite"
		path, _, _ := strings.Cut(source, "?")
		if dir := filepath.Dir(path); dir != "" {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, fmt.Errorf("inventory: store directory: %w", err)
			}
		}
	}
	if d == dialectSQLite {
		// Switching a new file to WAL takes an exclusive lock that SQLite
		// does not wait for (no busy handler): replicas opening one new
		// file at once would fail with SQLITE_BUSY. Openers of a file take
		// turns, across processes, until it is migrated.
		path, _, _ := strings.Cut(source, "?")
		unlock, err := flock.Lock(ctx, path+".lock")
		if err != nil {
			return nil, fmt.Errorf("inventory: open store: %w", err)
		}
		defer unlock()
	}
	db, err := sql.Open(driver, source)
	if err != nil {
		return nil, fmt.Errorf("inventory: open store: %w", err)
	}
	if d == dialectSQLite {
		// One writer at a time anyway; a few connections let reads overlap.
		db.SetMaxOpenConns(8)
		db.SetMaxIdleConns(8)
	} else {
		db.SetMaxOpenConns(16)
		db.SetMaxIdleConns(16)
		db.SetConnMaxIdleTime(5 * time.Minute)
	}
	s := &Store{db: db, dialect: d}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("inventory: connect to %s store: %w", d, err)
	}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	for _, q := range s.txQueries() {
		if _, err := s.stmt(ctx, q); err != nil {
			s.Close()
			return nil, fmt.Errorf("inventory: prepare %q: %w", q, err)
		}
	}
	return s, nil
}

// migrate applies every embedded migration not yet recorded in
// schema_migrations, all in one transaction.
func (s *Store) migrate(ctx context.Context) error {
	dir := "migrations/" + string(s.dialect)
	entries, err := fs.ReadDir(migrationFS, dir)
	if err != nil {
		return fmt.Errorf("inventory: migrations: %w", err)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })

	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("inventory: migrate: %w", err)
	}
	defer tx.Rollback()
	if s.dialect == dialectPostgres {
		// CREATE TABLE IF NOT EXISTS is not safe against a concurrent twin
		// on Postgres; SQLite's BEGIN IMMEDIATE already serialises us.
		if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrationLockID)); err != nil {
			return fmt.Errorf("inventory: migrate: lock: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    TEXT NOT NULL PRIMARY KEY,
		applied_at TEXT NOT NULL)`); err != nil {
		return fmt.Errorf("inventory: migrate: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		version := strings.TrimSuffix(e.Name(), ".sql")
		var one int
		err := tx.QueryRowContext(ctx, "SELECT 1 FROM schema_migrations WHERE version = $1", version).Scan(&one)
		if err == nil {
			continue
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("inventory: migrate: %w", err)
		}
		body, err := fs.ReadFile(migrationFS, dir+"/"+e.Name())
		if err != nil {
			return fmt.Errorf("inventory: migrate: %w", err)
		}
		if _, err := tx.ExecContext(ctx, string(body)); err != nil {
			return fmt.Errorf("inventory: migration %s: %w", version, err)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)",
			version, time.Now().UTC().Format(time.RFC3339Nano)); err != nil {
			return fmt.Errorf("inventory: migration %s: %w", version, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("inventory: migrate: %w", err)
	}
	return nil
}

// Close closes the connection pool. It is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.stmts.Range(func(_, st any) bool {
			st.(*sql.Stmt).Close()
			return true
		})
		s.closeErr = s.db.Close()
	})
	return s.closeErr
}

// stmt returns query's prepared statement, preparing it on first use.
// Every reservation runs the same few statements, and compiling each anew
// cost about a third of a millisecond of CPU per reservation on SQLite;
// database/sql then keeps it prepared on every connection that ran it.
func (s *Store) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if st, ok := s.stmts.Load(query); ok {
		return st.(*sql.Stmt), nil
	}
	st, err := s.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if prev, loaded := s.stmts.LoadOrStore(query, st); loaded {
		st.Close()
		return prev.(*sql.Stmt), nil
	}
	return st, nil
}

// queryRow runs a prepared query expected to return one row.
func (s *Store) queryRow(ctx context.Context, query string, args ...any) (*sql.Row, error) {
	st, err := s.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryRowContext(ctx, args...), nil
}

// exec runs a prepared statement.
func (s *Store) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	st, err := s.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

// txStmt is query's prepared statement inside tx. It never takes a second
// connection from the pool: a transaction holds its connection (and, on
// SQLite, the database's write lock) while it runs, and preparing on
// another connection would wait for one that the other transactions hold
// while they wait for that write lock. Under a burst that is a standstill
// for as long as SQLite's busy timeout, over and over: a load of a
// thousand concurrent reservations on a fresh store reserved nothing for
// 40 s. The statements of the write path are prepared when the store opens
// (txQueries); one that is not runs prepared on tx's own connection.
func (s *Store) txStmt(ctx context.Context, tx *sql.Tx, query string) (*sql.Stmt, error) {
	if st, ok := s.stmts.Load(query); ok {
		return tx.StmtContext(ctx, st.(*sql.Stmt)), nil
	}
	return tx.PrepareContext(ctx, query)
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("inventory: store ping: %w", err)
	}
	return nil
}

// Seed sets sku's stock for a run: it creates the SKU or overwrites its
// stock, deletes its ledger rows and zeroes its fenced-rejection count. The
// row's last fence is kept, because the store's fencing tokens must never go
// backwards; its etcd fence is zeroed, because the run may lock on a new etcd
// cluster, whose revisions start again at 1 and would all be rejected; and
// its version goes up, not back to 0: a seed is a write, and a db-version
// reader from before it must not be able to overwrite it.
func (s *Store) Seed(ctx context.Context, sku string, stock int64) error {
	return s.SeedMany(ctx, []string{sku}, stock)
}

// SeedMany is Seed for many SKUs at once, in one transaction of a few
// statements per thousand SKUs rather than a transaction per SKU: seeding
// the 100,000 SKUs of a large run takes about a second, not half a minute.
func (s *Store) SeedMany(ctx context.Context, skus []string, stock int64) error {
	if fe := wire.CheckStock(stock); fe != nil {
		return &fieldError{field: fe.Field, msg: fe.Msg}
	}
	skus = unique(skus)
	for _, sku := range skus {
		if err := validSKU(sku); err != nil {
			return err
		}
	}
	what := "seed"
	if len(skus) == 1 {
		what = "seed " + skus[0]
	} else if len(skus) > 1 {
		what = fmt.Sprintf("seed %d SKUs", len(skus))
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("inventory: %s: %w", what, err)
	}
	defer tx.Rollback()
	ts := now()
	const upsert = ` ON CONFLICT (sku) DO UPDATE SET stock = excluded.stock, fenced_rejections = 0, etcd_fence = 0,
		version = inventory.version + 1, updated_at = excluded.updated_at`
	err = s.batches(skus, func(batch []string) error {
		if s.dialect == dialectPostgres {
			if _, err := tx.ExecContext(ctx, `INSERT INTO inventory (sku, stock, last_fence, fenced_rejections, updated_at)
				SELECT sku, $2, 0, 0, $3 FROM unnest($1::text[]) AS sku`+upsert, batch, stock, ts); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "DELETE FROM reservations WHERE sku = ANY($1)", batch)
			return err
		}
		var b strings.Builder
		args := make([]any, 0, len(batch)+2)
		args = append(args, stock, ts)
		b.WriteString("INSERT INTO inventory (sku, stock, last_fence, fenced_rejections, updated_at) VALUES ")
		for i, sku := range batch {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "($%d, $1, 0, 0, $2)", i+3)
			args = append(args, sku)
		}
		b.WriteString(upsert)
		if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "DELETE FROM reservations WHERE sku IN ("+placeholders(len(batch), 1)+")", args[2:]...)
		return err
	})
	if err != nil {
		return fmt.Errorf("inventory: %s: %w", what, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("inventory: %s: %w", what, err)
	}
	return nil
}

// batchSize is how many SKUs one statement of SeedMany or Audit covers on
// SQLite (each is a bound parameter; SQLite allows 32,766). Postgres takes
// a whole list as one array parameter.
const batchSize = 500

// batches calls fn with successive parts of skus: batchSize at a time on
// SQLite, all at once on Postgres.
func (s *Store) batches(skus []string, fn func([]string) error) error {
	n := batchSize
	if s.dialect == dialectPostgres {
		n = max(len(skus), 1)
	}
	for len(skus) > 0 {
		batch := skus[:min(n, len(skus))]
		skus = skus[len(batch):]
		if err := fn(batch); err != nil {
			return err
		}
	}
	return nil
}

// placeholders returns "$from, $from+1, …", n of them.
func placeholders(n, from int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "$%d", from+i)
	}
	return b.String()
}

// unique returns skus without repeats, in first-seen order.
func unique(skus []string) []string {
	seen := make(map[string]struct{}, len(skus))
	out := make([]string, 0, len(skus))
	for _, sku := range skus {
		if _, ok := seen[sku]; !ok {
			seen[sku] = struct{}{}
			out = append(out, sku)
		}
	}
	return out
}

// Stock returns sku's current stock, or ErrNotFound.
func (s *Store) Stock(ctx context.Context, sku string) (int64, error) {
	var stock int64
	row, err := s.queryRow(ctx, "SELECT stock FROM inventory WHERE sku = $1", sku)
	if err == nil {
		err = row.Scan(&stock)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("%w: %q", ErrNotFound, sku)
	}
	if err != nil {
		return 0, fmt.Errorf("inventory: read stock of %s: %w", sku, err)
	}
	return stock, nil
}

// stockVersion returns sku's stock and row version (the db-version guard's
// read), or ErrNotFound.
func (s *Store) stockVersion(ctx context.Context, sku string) (stock, version int64, err error) {
	row, err := s.queryRow(ctx, "SELECT stock, version FROM inventory WHERE sku = $1", sku)
	if err == nil {
		err = row.Scan(&stock, &version)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, fmt.Errorf("%w: %q", ErrNotFound, sku)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("inventory: read stock and version of %s: %w", sku, err)
	}
	return stock, version, nil
}

// now is the store's timestamp: UTC, microseconds (what Postgres keeps), so
// a reservation read back equals the one returned at commit.
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// nextFence takes the next fencing token. It commits on its own, so the
// counter only ever goes up, whatever happens to the reservation.
func (s *Store) nextFence(ctx context.Context) (int64, error) {
	var t int64
	row, err := s.queryRow(ctx, "UPDATE fence_seq SET value = value + 1 WHERE id = 1 RETURNING value")
	if err == nil {
		err = row.Scan(&t)
	}
	if err != nil {
		return 0, fmt.Errorf("inventory: next fencing token: %w", err)
	}
	return t, nil
}

// fenceColumn is a row's column of fencing tokens. Each token source has
// its own: tokens from different sources are not ordered with each other.
type fenceColumn string

const (
	// fenceStore holds tokens of the store's own counter (nextFence).
	fenceStore fenceColumn = "last_fence"
	// fenceEtcd holds etcd revisions, which a new etcd cluster counts from
	// 1 again; Seed resets it.
	fenceEtcd fenceColumn = "etcd_fence"
)

// fence marks sku's row with token t in column col before the holder reads
// it, so that any older holder's pending write will be rejected. A row
// already fenced by a newer token means this holder is the stale one:
// ErrFenced, counted.
func (s *Store) fence(ctx context.Context, col fenceColumn, sku string, t int64) error {
	res, err := s.exec(ctx, "UPDATE inventory SET "+string(col)+" = $2 WHERE sku = $1 AND "+string(col)+" < $2", sku, t)
	if err != nil {
		return fmt.Errorf("inventory: fence %s: %w", sku, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("inventory: fence %s: %w", sku, err)
	} else if n == 1 {
		return nil
	}
	if _, err := s.Stock(ctx, sku); err != nil {
		return err
	}
	return s.rejectFenced(ctx, sku, t)
}

// rejectFenced counts one rejected stale holder and returns ErrFenced.
func (s *Store) rejectFenced(ctx context.Context, sku string, t int64) error {
	if _, err := s.exec(ctx, "UPDATE inventory SET fenced_rejections = fenced_rejections + 1 WHERE sku = $1", sku); err != nil {
		return fmt.Errorf("inventory: count fenced rejection of %s: %w", sku, err)
	}
	return fmt.Errorf("%w: sku %q, token %d", ErrFenced, sku, t)
}

// Reservation looks a request ID up in the ledger: the reservation it made,
// and whether it made one. It answers the question a client whose request
// got no answer has: did it commit?
func (s *Store) Reservation(ctx context.Context, requestID string) (Reservation, bool, error) {
	var r Reservation
	var guard string
	row, err := s.queryRow(ctx, `SELECT id, request_id, sku, quantity, guard, holder, fence, created_at, stock_after
		FROM reservations WHERE request_id = $1`, requestID)
	if err == nil {
		err = row.Scan(&r.ID, &r.RequestID, &r.SKU, &r.Quantity, &guard, &r.Holder, &r.Fence, &r.CreatedAt, &r.StockAfter)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return Reservation{}, false, nil
	}
	if err != nil {
		return Reservation{}, false, fmt.Errorf("inventory: look up request %q: %w", requestID, err)
	}
	r.Guard = Guard(guard)
	r.CreatedAt = r.CreatedAt.UTC()
	return r, true, nil
}

// writeMode is how a reservation's stock change is applied.
type writeMode int

const (
	// writeBlind sets stock to the value the holder computed: correct only
	// if nobody wrote since the holder's read.
	writeBlind writeMode = iota
	// writeFenced sets stock only if the row's fence column still carries
	// the holder's token (set by fence before the read).
	writeFenced
	// writeNaive checks the token only now: the row's last fence must not
	// be newer, and takes the holder's token. Loses updates when two holders'
	// read-modify-writes interleave.
	writeNaive
	// writeAtomic decrements in the database: no read, no lock.
	writeAtomic
	// writeVersioned sets stock only if the row still has the version the
	// holder read, and bumps it (optimistic locking); otherwise nothing is
	// written and apply returns errVersionConflict.
	writeVersioned
)

// write is one reservation's stock change plus its ledger row.
type write struct {
	mode     writeMode
	req      Request
	newStock int64       // blind, fenced, naive, versioned
	fence    int64       // fenced, naive
	column   fenceColumn // fenced, naive: where the token is
	version  int64       // versioned: the version the holder read
	guard    Guard
	holder   string
}

// writeQuery is the UPDATE of a write in mode (col: the fence column of the
// fenced and naive modes). Its arguments: $1 the SKU, $2 the new stock (the
// quantity for atomic), $3 the time, $4 the fence or the version read.
func writeQuery(mode writeMode, col fenceColumn) (string, error) {
	switch mode {
	case writeBlind:
		return "UPDATE inventory SET stock = $2, updated_at = $3 WHERE sku = $1", nil
	case writeFenced:
		return "UPDATE inventory SET stock = $2, updated_at = $3 WHERE sku = $1 AND " + string(col) + " = $4", nil
	case writeNaive:
		return "UPDATE inventory SET stock = $2, updated_at = $3, " + string(col) + " = $4 WHERE sku = $1 AND " + string(col) + " <= $4", nil
	case writeAtomic:
		return "UPDATE inventory SET stock = stock - $2, updated_at = $3 WHERE sku = $1 AND stock >= $2 RETURNING stock", nil
	case writeVersioned:
		return "UPDATE inventory SET stock = $2, version = version + 1, updated_at = $3 WHERE sku = $1 AND version = $4", nil
	}
	return "", fmt.Errorf("unknown write mode %d", mode)
}

// The statements of the write path besides writeQuery's.
const (
	selectStock  = "SELECT stock FROM inventory WHERE sku = $1"
	insertLedger = `INSERT INTO reservations (request_id, sku, quantity, guard, holder, fence, created_at, stock_after)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (request_id) DO NOTHING
		RETURNING id`
	pgSetLockTimeout = "SELECT set_config('lock_timeout', $1, true)"
)

// txQueries are the statements that run inside a transaction (apply,
// lockRow), prepared when the store opens: see txStmt.
func (s *Store) txQueries() []string {
	qs := []string{selectStock, insertLedger}
	if s.dialect == dialectPostgres {
		qs = append(qs, pgSetLockTimeout, selectStock+" FOR UPDATE")
	}
	for _, m := range []writeMode{writeBlind, writeFenced, writeNaive, writeAtomic, writeVersioned} {
		for _, col := range []fenceColumn{fenceStore, fenceEtcd} {
			if q, err := writeQuery(m, col); err == nil && !slices.Contains(qs, q) {
				qs = append(qs, q)
			}
		}
	}
	return qs
}

// errReplay: the ledger already holds this request ID (a concurrent twin
// committed first); the transaction was rolled back.
var errReplay = errors.New("inventory: request already reserved")

// errVersionConflict: a versioned write found the row at another version
// than the one its holder read (someone wrote in between); nothing was
// written. The db-version guard reads again and retries.
var errVersionConflict = errors.New("inventory: row version changed since the read")

// apply changes the stock and writes the ledger row in one transaction.
func (s *Store) apply(ctx context.Context, w write) (Reservation, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Reservation{}, fmt.Errorf("inventory: write %s: %w", w.req.SKU, err)
	}
	defer tx.Rollback()
	return s.applyTx(ctx, tx, w)
}

// applyTx is apply inside tx, which it commits on success: the one write
// path of every guard, whether the transaction was begun for the write
// alone (apply) or holds the row lock since the read (lockRow).
func (s *Store) applyTx(ctx context.Context, tx *sql.Tx, w write) (Reservation, error) {
	sku := w.req.SKU
	ts := now()
	query, err := writeQuery(w.mode, w.column)
	if err != nil {
		return Reservation{}, fmt.Errorf("inventory: write %s: %w", sku, err)
	}
	var args []any
	switch w.mode {
	case writeBlind:
		args = []any{sku, w.newStock, ts}
	case writeFenced, writeNaive:
		args = []any{sku, w.newStock, ts, w.fence}
	case writeAtomic:
		args = []any{sku, w.req.Quantity, ts}
	case writeVersioned:
		args = []any{sku, w.newStock, ts, w.version}
	}
	// n is the rows the write changed; after the stock it left.
	var n int64
	after := w.newStock
	st, err := s.txStmt(ctx, tx, query)
	if err == nil && w.mode == writeAtomic {
		err = st.QueryRowContext(ctx, args...).Scan(&after)
		n = 1
		if errors.Is(err, sql.ErrNoRows) {
			n, err = 0, nil
		}
	} else if err == nil {
		var res sql.Result
		if res, err = st.ExecContext(ctx, args...); err == nil {
			n, err = res.RowsAffected()
		}
	}
	if err != nil {
		return Reservation{}, fmt.Errorf("inventory: write %s: %w", sku, err)
	}
	if n == 0 {
		var stock int64
		st, err := s.txStmt(ctx, tx, selectStock)
		if err == nil {
			err = st.QueryRowContext(ctx, sku).Scan(&stock)
		}
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return Reservation{}, fmt.Errorf("%w: %q", ErrNotFound, sku)
		case err != nil:
			return Reservation{}, fmt.Errorf("inventory: write %s: %w", sku, err)
		case w.mode == writeAtomic:
			return Reservation{}, outOfStock(w.req, stock)
		case w.mode == writeVersioned:
			return Reservation{}, errVersionConflict
		}
		_ = tx.Rollback()
		return Reservation{}, s.rejectFenced(ctx, sku, w.fence)
	}

	r := Reservation{
		RequestID: w.req.RequestID, SKU: sku, Quantity: w.req.Quantity,
		Guard: w.guard, Holder: w.holder, Fence: w.fence, CreatedAt: ts, StockAfter: after,
	}
	st, err = s.txStmt(ctx, tx, insertLedger)
	if err == nil {
		err = st.QueryRowContext(ctx, r.RequestID, r.SKU, r.Quantity, string(r.Guard), r.Holder, r.Fence, r.CreatedAt, r.StockAfter).Scan(&r.ID)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return Reservation{}, errReplay
	}
	if err != nil {
		return Reservation{}, fmt.Errorf("inventory: ledger %s: %w", sku, err)
	}
	if err := tx.Commit(); err != nil {
		return Reservation{}, fmt.Errorf("inventory: commit %s: %w", sku, err)
	}
	return r, nil
}

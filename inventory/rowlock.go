package inventory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// pgLockNotAvailable is PostgreSQL's SQLSTATE for a lock wait that ran out
// of lock_timeout.
const pgLockNotAvailable = "55P03"

// rowLock is a transaction that holds a SKU's row lock from its read to its
// commit: the critical section of GuardDBForUpdate, with the database as
// the lock service. apply or rollback ends it.
type rowLock struct {
	s     *Store
	tx    *sql.Tx
	sku   string
	stock int64
}

// lockRow begins a transaction, locks sku's row and reads its stock.
//
// On PostgreSQL the read is SELECT … FOR UPDATE, and SET LOCAL lock_timeout
// bounds the wait behind another holder to wait: a waiter that runs out
// gets ErrContended, as a Redlock acquire does.
//
// SQLite has no row locks and no FOR UPDATE. The store's transactions begin
// IMMEDIATE (sqlitePragmas), so this one holds the database's write lock
// from its first statement: the read runs under a lock on the whole
// database, every SKU, not the row. A waiter waits in BEGIN for SQLite's
// busy timeout (5 s), not for wait; past it SQLite answers SQLITE_BUSY,
// reported as ErrUnavailable: the database, as a lock service, did not
// answer in time.
func (s *Store) lockRow(ctx context.Context, sku string, wait time.Duration) (*rowLock, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, lockRowError(sku, err)
	}
	l := &rowLock{s: s, tx: tx, sku: sku}
	query := selectStock
	if s.dialect == dialectPostgres {
		query += " FOR UPDATE"
		st, err := s.txStmt(ctx, tx, pgSetLockTimeout)
		if err == nil {
			_, err = st.ExecContext(ctx, lockTimeout(wait))
		}
		if err != nil {
			l.rollback()
			return nil, lockRowError(sku, err)
		}
	}
	st, err := s.txStmt(ctx, tx, query)
	if err == nil {
		err = st.QueryRowContext(ctx, sku).Scan(&l.stock)
	}
	if err != nil {
		l.rollback()
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("%w: %q", ErrNotFound, sku)
		}
		return nil, lockRowError(sku, err)
	}
	return l, nil
}

// lockTimeout renders wait as a lock_timeout setting: whole milliseconds,
// at least 1 (0 would mean no bound).
func lockTimeout(wait time.Duration) string {
	return strconv.FormatInt(max(wait.Milliseconds(), 1), 10) + "ms"
}

// lockRowError says why the row lock was not taken: another holder kept it
// past the wait (ErrContended), SQLite's database lock stayed busy past its
// timeout (ErrUnavailable), or the store failed.
func lockRowError(sku string, err error) error {
	var pe *pgconn.PgError
	var se *sqlite.Error
	switch {
	case errors.As(err, &pe) && pe.Code == pgLockNotAvailable:
		return fmt.Errorf("%w: row lock of %s: %w", ErrContended, sku, err)
	case errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY:
		return fmt.Errorf("%w: SQLite database lock (held for %s or another SKU): %w", ErrUnavailable, sku, err)
	default:
		return fmt.Errorf("inventory: lock row %s: %w", sku, err)
	}
}

// apply writes w in the locked transaction and commits, which releases the
// lock.
func (l *rowLock) apply(ctx context.Context, w write) (Reservation, error) {
	return l.s.applyTx(ctx, l.tx, w)
}

// rollback ends the transaction without writing, releasing the lock; after
// apply it does nothing.
func (l *rowLock) rollback() { _ = l.tx.Rollback() }

package inventory

import (
	"context"
	"database/sql"
	"fmt"
)

// The checker's reads of the store: the audit of each SKU's stock against
// its ledger, and the ledger itself.

// Audit is the protected-resource half of the safety checker: for each SKU,
// does initial − final equal the sum of the ledger?
type Audit struct {
	PerSKU map[string]SKUAudit
	// LostUpdates is Σ|Drift| over the SKUs, in units.
	LostUpdates int64
	// Oversell counts SKUs whose stock went below zero.
	Oversell int64
	// FencedRejections counts stale writes the store turned away.
	FencedRejections int64
}

// SKUAudit is one SKU's line of an Audit.
type SKUAudit struct {
	SKU            string
	Initial, Final int64
	// Reserved is the sum of the ledger's quantities; Reservations its rows.
	Reserved, Reservations int64
	// Drift is initial − final − reserved. Zero when nothing was lost; a
	// negative drift means units were sold twice (lost updates).
	Drift            int64
	FencedRejections int64
}

// Audit checks skus against their initial stock (as seeded). It fails with
// ErrNotFound for an unknown SKU and ErrInvalid when initial lacks one. Each
// SKU's stock and ledger come from one statement, so from one snapshot; the
// SKUs are read a batch per statement.
func (s *Store) Audit(ctx context.Context, skus []string, initial map[string]int64) (Audit, error) {
	skus = unique(skus)
	a := Audit{PerSKU: make(map[string]SKUAudit, len(skus))}
	for _, sku := range skus {
		if _, ok := initial[sku]; !ok {
			return Audit{}, fmt.Errorf("%w: audit: no initial stock for %q", ErrInvalid, sku)
		}
	}
	const query = `SELECT i.sku, i.stock, i.fenced_rejections, CAST(COALESCE(SUM(r.quantity), 0) AS BIGINT), COUNT(r.id)
		FROM inventory i LEFT JOIN reservations r ON r.sku = i.sku
		WHERE i.sku %s
		GROUP BY i.sku, i.stock, i.fenced_rejections`
	err := s.batches(skus, func(batch []string) error {
		var rows *sql.Rows
		var err error
		if s.dialect == dialectPostgres {
			rows, err = s.db.QueryContext(ctx, fmt.Sprintf(query, "= ANY($1)"), batch)
		} else {
			args := make([]any, len(batch))
			for i, sku := range batch {
				args[i] = sku
			}
			rows, err = s.db.QueryContext(ctx, fmt.Sprintf(query, "IN ("+placeholders(len(batch), 1)+")"), args...)
		}
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var line SKUAudit
			if err := rows.Scan(&line.SKU, &line.Final, &line.FencedRejections, &line.Reserved, &line.Reservations); err != nil {
				return err
			}
			line.Initial = initial[line.SKU]
			line.Drift = line.Initial - line.Final - line.Reserved
			a.PerSKU[line.SKU] = line
			a.LostUpdates += abs(line.Drift)
			if line.Final < 0 {
				a.Oversell++
			}
			a.FencedRejections += line.FencedRejections
		}
		return rows.Err()
	})
	if err != nil {
		return Audit{}, fmt.Errorf("inventory: audit: %w", err)
	}
	for _, sku := range skus {
		if _, ok := a.PerSKU[sku]; !ok {
			return Audit{}, fmt.Errorf("%w: %q", ErrNotFound, sku)
		}
	}
	return a, nil
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// Committed is one row of the ledger: a reservation the store committed,
// and the stock it left (-1 when the row predates that column).
type Committed struct {
	RequestID  string
	SKU        string
	Quantity   int64
	StockAfter int64
}

// Ledger returns every committed reservation, in the order they were
// written: a checker's ground truth for the requests whose answer was lost.
func (s *Store) Ledger(ctx context.Context) ([]Committed, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT request_id, sku, quantity, stock_after FROM reservations ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("inventory: ledger: %w", err)
	}
	defer rows.Close()
	var out []Committed
	for rows.Next() {
		var c Committed
		if err := rows.Scan(&c.RequestID, &c.SKU, &c.Quantity, &c.StockAfter); err != nil {
			return nil, fmt.Errorf("inventory: ledger: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inventory: ledger: %w", err)
	}
	return out, nil
}

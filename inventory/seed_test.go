package inventory

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

func TestSeedMany(t *testing.T) {
	forEachStore(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s := openStore(t, dsn)
		// More than one SQLite batch, with a repeat.
		skus := make([]string, 1234)
		for i := range skus {
			skus[i] = fmt.Sprintf("many-%04d", i)
		}
		if err := s.SeedMany(ctx, append(skus, skus[7]), 50); err != nil {
			t.Fatalf("SeedMany: %v", err)
		}
		// A reservation and a fence on one of them, then a new run.
		if _, err := s.apply(ctx, write{mode: writeAtomic, req: Request{SKU: skus[3], Quantity: 2, RequestID: "seed-r1"}, guard: GuardDBAtomic}); err != nil {
			t.Fatal(err)
		}
		tok, err := s.nextFence(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.fence(ctx, fenceStore, skus[3], tok); err != nil {
			t.Fatal(err)
		}
		if err := s.SeedMany(ctx, skus, 20); err != nil {
			t.Fatalf("SeedMany again: %v", err)
		}
		initial := make(map[string]int64, len(skus))
		for _, sku := range skus {
			initial[sku] = 20
		}
		a, err := s.Audit(ctx, skus, initial)
		if err != nil {
			t.Fatalf("Audit: %v", err)
		}
		if len(a.PerSKU) != len(skus) || a.LostUpdates != 0 || a.Oversell != 0 {
			t.Fatalf("audit after the second seed: got %d SKUs, %d lost, %d oversold; want %d, 0, 0", len(a.PerSKU), a.LostUpdates, a.Oversell, len(skus))
		}
		for _, sku := range []string{skus[0], skus[3], skus[len(skus)-1]} {
			if l := a.PerSKU[sku]; l.Final != 20 || l.Reservations != 0 {
				t.Errorf("%s: got %+v, want stock 20 and no reservations (the ledger is cleared)", sku, l)
			}
		}
		// The fence survives the seed: fencing tokens never go backwards.
		if err := s.fence(ctx, fenceStore, skus[3], tok); !errors.Is(err, ErrFenced) {
			t.Errorf("fence with the pre-seed token after the seed: got %v, want ErrFenced", err)
		}
		// One bad SKU: nothing is written.
		if err := s.SeedMany(ctx, []string{"fresh-1", "bad sku", "fresh-2"}, 5); !errors.Is(err, ErrInvalid) {
			t.Errorf("SeedMany with a bad SKU: got %v, want ErrInvalid", err)
		}
		if _, err := s.Stock(ctx, "fresh-1"); !errors.Is(err, ErrNotFound) {
			t.Errorf("after a refused SeedMany: got %v, want fresh-1 not seeded", err)
		}
		if err := s.SeedMany(ctx, skus, -1); !errors.Is(err, ErrInvalid) {
			t.Errorf("SeedMany(-1): got %v, want ErrInvalid", err)
		}
		if _, err := s.Audit(ctx, []string{skus[0], "never-seeded"}, map[string]int64{skus[0]: 20, "never-seeded": 1}); !errors.Is(err, ErrNotFound) {
			t.Errorf("Audit with an unknown SKU: got %v, want ErrNotFound", err)
		}
	})
}

// BenchmarkSeedMany seeds 100,000 SKUs into a fresh SQLite store, as `redlab
// load --keys uniform:100000` does before its run, and audits them, as it
// does after.
func BenchmarkSeedMany(b *testing.B) {
	const n = 100_000
	skus := make([]string, n)
	initial := make(map[string]int64, n)
	for i := range skus {
		skus[i] = fmt.Sprintf("sku-%06d", i)
		initial[skus[i]] = 1000
	}
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		s, err := OpenStore(ctx, "sqlite:"+filepath.Join(b.TempDir(), "seed.db"))
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		if err := s.SeedMany(ctx, skus, 1000); err != nil {
			b.Fatal(err)
		}
		seeded := time.Since(start)
		if _, err := s.Audit(ctx, skus, initial); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(seeded.Seconds(), "seed-s")
		b.ReportMetric((time.Since(start) - seeded).Seconds(), "audit-s")
		b.StopTimer()
		s.Close()
		b.StartTimer()
	}
}

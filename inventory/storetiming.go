package inventory

import (
	"context"
	"time"
)

// The store calls of a reservation, timed into the store latency metric
// when the service has metrics (WithMetrics).

func (s *Service) timeStore(op string, start time.Time) {
	if s.m != nil {
		s.m.store.WithLabelValues(op).Observe(time.Since(start).Seconds())
	}
}

func (s *Service) lookup(ctx context.Context, requestID string) (Reservation, bool, error) {
	defer s.timeStore(storeLookup, time.Now())
	return s.store.Reservation(ctx, requestID)
}

func (s *Service) read(ctx context.Context, sku string) (int64, error) {
	defer s.timeStore(storeRead, time.Now())
	return s.store.Stock(ctx, sku)
}

func (s *Service) apply(ctx context.Context, w write) (Reservation, error) {
	defer s.timeStore(storeWrite, time.Now())
	return s.store.apply(ctx, w)
}

// fence fences sku's row with token in the guard's fence column.
func (s *Service) fence(ctx context.Context, sku string, token int64) error {
	defer s.timeStore(storeFence, time.Now())
	return s.store.fence(ctx, s.guard.fenceColumn(), sku, token)
}

func (s *Service) nextFence(ctx context.Context) (int64, error) {
	defer s.timeStore(storeNextFence, time.Now())
	return s.store.nextFence(ctx)
}

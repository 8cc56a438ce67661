package flock

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

func TestLockIsExclusive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	unlock, err := Lock(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := Lock(ctx, path); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Lock while held: got %v, want %v", err, context.DeadlineExceeded)
	}

	// A waiter gets the lock once it is released.
	got := make(chan error, 1)
	go func() {
		u, err := Lock(context.Background(), path)
		if err == nil {
			u()
		}
		got <- err
	}()
	unlock()
	if err := <-got; err != nil {
		t.Fatalf("Lock after release: %v", err)
	}
}

func TestLockBadPath(t *testing.T) {
	if _, err := Lock(context.Background(), filepath.Join(t.TempDir(), "missing", "lock")); err == nil {
		t.Fatal("Lock in a missing directory: got nil error, want one")
	}
}

package etcdstatus_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/internal/etcdstatus"
	"github.com/redlocklab/redlocklab/internal/etcdtest"
)

func TestGetAndHealthy(t *testing.T) {
	c := etcdtest.Start(t, 1, etcdtest.Options{})
	m := c.Members[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := etcdstatus.Healthy(ctx, m.ClientURL); err != nil {
		t.Fatalf("Healthy: %v", err)
	}
	s, err := etcdstatus.Get(ctx, m.ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	if s.MemberID == 0 || s.Leader != s.MemberID || s.RaftTerm == 0 || !strings.HasPrefix(s.Version, "3.") {
		t.Fatalf("status of a single member: got %+v, want itself as leader, a term and a 3.x version", s)
	}
	if _, err := c.Client().Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	s2, err := etcdstatus.Get(ctx, m.ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	if s2.Revision != s.Revision+1 {
		t.Fatalf("revision after one put: got %d, want %d", s2.Revision, s.Revision+1)
	}
	i, _, err := etcdstatus.Leader(ctx, c.Endpoints())
	if err != nil || i != 0 {
		t.Fatalf("Leader: got %d, %v; want 0", i, err)
	}

	m.Kill()
	if err := etcdstatus.Healthy(ctx, m.ClientURL); err == nil {
		t.Fatal("Healthy of a killed member: got nil, want an error")
	}
}

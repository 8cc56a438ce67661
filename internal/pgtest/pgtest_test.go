package pgtest

import (
	"context"
	"database/sql"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

func TestSchemaName(t *testing.T) {
	valid := regexp.MustCompile(`^t_[a-z0-9_]{1,40}_[0-9a-f]{12}$`)
	for _, name := range []string{"TestX", "TestStore/sqlite/none#01", strings.Repeat("VeryLong", 20), "Ünïcode/σ"} {
		got := schemaName(name)
		if !valid.MatchString(got) || len(got) > 63 {
			t.Errorf("schemaName(%q) = %q, want t_<name>_<12 hex> of at most 63 bytes", name, got)
		}
	}
	if a, b := schemaName("TestX"), schemaName("TestX"); a == b {
		t.Errorf("schemaName twice gave %q both times, want distinct names", a)
	}
}

func TestDSNIsolatesAndDrops(t *testing.T) {
	ctx := context.Background()
	var schema string
	t.Run("inner", func(t *testing.T) {
		a, b := DSN(t), DSN(t)
		u, _ := url.Parse(a)
		schema = u.Query().Get("search_path")
		if schema == "" {
			t.Fatalf("DSN %q has no search_path", a)
		}
		dbA := open(t, a)
		if _, err := dbA.ExecContext(ctx, "CREATE TABLE only_in_a (x INT)"); err != nil {
			t.Fatalf("create table: %v", err)
		}
		var n int
		err := open(t, b).QueryRowContext(ctx, "SELECT count(*) FROM information_schema.tables WHERE table_name = 'only_in_a' AND table_schema = current_schema()").Scan(&n)
		if err != nil {
			t.Fatalf("query other schema: %v", err)
		}
		if n != 0 {
			t.Errorf("table of schema A visible from schema B: got %d, want 0", n)
		}
	})
	if t.Failed() || t.Skipped() {
		return
	}
	var n int
	if err := open(t, Require(t)).QueryRowContext(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema).Scan(&n); err != nil {
		t.Fatalf("look for schema: %v", err)
	}
	if n != 0 {
		t.Errorf("schema %s still exists after the test ended: got %d, want 0", schema, n)
	}
}

func open(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

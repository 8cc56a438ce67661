// Package pgtest gives each test its own PostgreSQL schema in the server
// named by REDLAB_TEST_POSTGRES (a postgres:// URL; .ci/run starts Debian's
// cluster and exports it). The schema is dropped when the test ends, so
// tests can run in parallel against one database without seeing each other.
//
// When the variable is unset the test ends by the rule of testenv.Missing:
// it fails under CI=true and is skipped, loudly, otherwise.
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/redlocklab/redlocklab/internal/testenv"
)

// EnvDSN names the variable holding the test server's URL.
const EnvDSN = "REDLAB_TEST_POSTGRES"

// Require returns the server URL from EnvDSN, or ends the test by
// testenv.Missing when it is unset.
func Require(tb testing.TB) string {
	tb.Helper()
	dsn := os.Getenv(EnvDSN)
	if dsn != "" {
		return dsn
	}
	testenv.Missing(tb, fmt.Sprintf("%s is not set; start PostgreSQL and export e.g. %s=postgres://redlab:redlab@127.0.0.1:5432/redlab?sslmode=disable (.ci/run does both)", EnvDSN, EnvDSN))
	return ""
}

// DSN creates a fresh schema for the test and returns a URL whose
// connections use it (search_path), dropping the schema at cleanup.
func DSN(tb testing.TB) string {
	tb.Helper()
	base := Require(tb)
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		tb.Fatalf("pgtest: %s must be a postgres:// URL, got %q", EnvDSN, base)
	}
	schema := schemaName(tb.Name())

	admin, err := sql.Open("pgx", base)
	if err != nil {
		tb.Fatalf("pgtest: open: %v", err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+quoteIdent(schema)); err != nil {
		tb.Fatalf("pgtest: create schema %s in %s: %v", schema, u.Redacted(), err)
	}
	tb.Cleanup(func() {
		db, err := sql.Open("pgx", base)
		if err != nil {
			tb.Errorf("pgtest: open for cleanup: %v", err)
			return
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+quoteIdent(schema)+" CASCADE"); err != nil {
			tb.Errorf("pgtest: drop schema %s: %v", schema, err)
		}
	})

	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// schemaName is a valid, unique, lower-case identifier of at most 63 bytes
// that still says which test made it.
func schemaName(test string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(test) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	name := b.String()
	if len(name) > 40 {
		name = name[:40]
	}
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	return fmt.Sprintf("t_%s_%s", name, hex.EncodeToString(suffix))
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

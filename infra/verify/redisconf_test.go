package verify

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlocklab/redlocklab/internal/testenv"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

const (
	testRedlockPassword = "redlock-test-password-0123"
	testMonitorPassword = "monitor-test-password-4567"
)

// redisProfile is one way the lab or a deployment renders redis.conf.
type redisProfile struct {
	name  string
	vars  map[string]any
	acl   bool
	tls   bool
	wants map[string]string // CONFIG GET name -> value
}

// TestRedisConfRealServer starts redis-server with each rendered redis.conf
// and reads the rules back through CONFIG GET, as the monitor user when the
// ACL is on.
func TestRedisConfRealServer(t *testing.T) {
	bin := testenv.Require(t, "redis-server")
	root := t.TempDir()
	durable := map[string]string{
		"appendonly":                "yes",
		"appendfsync":               "always",
		"no-appendfsync-on-rewrite": "no",
		"maxmemory-policy":          "noeviction",
		"maxmemory":                 "268435456",
		"protected-mode":            "yes",
		"bind":                      "127.0.0.1",
		"save":                      "",
	}
	with := func(over map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range durable {
			m[k] = v
		}
		for k, v := range over {
			m[k] = v
		}
		return m
	}
	profiles := []redisProfile{
		{name: "acl", acl: true, wants: durable},
		{name: "everysec", vars: map[string]any{"fsync": "everysec", "acl_enabled": false}, wants: with(map[string]string{"appendfsync": "everysec"})},
		{name: "none", vars: map[string]any{"persistence": false, "acl_enabled": false}, wants: with(map[string]string{"appendonly": "no"})},
		{name: "tls", acl: true, tls: true, wants: with(map[string]string{"port": "0"})},
	}

	vars := map[string]map[string]any{}
	ports := map[string]int{}
	for _, p := range profiles {
		dir := filepath.Join(root, p.name)
		ports[p.name] = redlocktest.FreePort(t)
		v := map[string]any{
			"bind_address":      "127.0.0.1",
			"port":              ports[p.name],
			"max_lock_ttl":      1,
			"data_dir":          filepath.Join(dir, "data"),
			"log_file":          filepath.Join(dir, "redis.log"),
			"guard_state_dir":   filepath.Join(dir, "guard-state"),
			"guard_runtime_dir": filepath.Join(dir, "guard-run"),
			"redlock_password":  testRedlockPassword,
			"monitor_password":  testMonitorPassword,
		}
		if p.tls {
			v["tls"] = map[string]any{
				"cert_file": filepath.Join(dir, "tls", "node.crt"),
				"key_file":  filepath.Join(dir, "tls", "node.key"),
				"ca_file":   filepath.Join(dir, "tls", "ca.crt"),
			}
		}
		for k, x := range p.vars {
			v[k] = x
		}
		vars[p.name] = v
	}
	nodes := render(t, vars)

	for _, p := range profiles {
		t.Run(p.name, func(t *testing.T) {
			dir := filepath.Join(root, p.name)
			if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
				t.Fatal(err)
			}
			opts := &redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", ports[p.name]), MaxRetries: -1, DialTimeout: time.Second}
			if p.tls {
				opts.TLSConfig = writeTLSFiles(t, filepath.Join(dir, "tls"))
			}
			conf := writeFile(t, dir, "redis.conf", nodes[p.name].RedisConf, 0o600)
			redlocktest.StartConf(t, bin, conf, dir, opts)

			admin := userClient(t, opts, "", "")
			if p.acl {
				admin = userClient(t, opts, "monitor", testMonitorPassword)
			}
			ctx := context.Background()
			for name, want := range p.wants {
				got, err := admin.ConfigGet(ctx, name).Result()
				if err != nil {
					t.Fatalf("CONFIG GET %s: %v", name, err)
				}
				if got[name] != want {
					t.Errorf("CONFIG GET %s: got %q, want %q", name, got[name], want)
				}
			}
			info, err := admin.Info(ctx, "replication").Result()
			if err != nil {
				t.Fatalf("INFO replication: %v", err)
			}
			for _, want := range []string{"role:master", "connected_slaves:0"} {
				if !strings.Contains(info, want) {
					t.Errorf("INFO replication: got %q, want it to contain %q", info, want)
				}
			}
			if p.acl {
				checkACL(t, opts)
			}
		})
	}
}

// checkACL drives the rendered ACL through go-redis, which sends HELLO (and on
// failure AUTH) on connect just as the library's clients do.
func checkACL(t *testing.T, opts *redis.Options) {
	t.Helper()
	ctx := context.Background()
	anonymous := userClient(t, opts, "", "")
	lock := userClient(t, opts, "redlock", testRedlockPassword)
	monitor := userClient(t, opts, "monitor", testMonitorPassword)

	const release = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`
	const extend = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`
	releaseScript := redis.NewScript(release)
	extendScript := redis.NewScript(extend)

	allowed := []struct {
		name string
		run  func() error
	}{
		{"redlock SET lock:x tok NX PX", func() error { return lock.Do(ctx, "set", "lock:x", "tok", "NX", "PX", 10000).Err() }},
		{"redlock GET lock:x", func() error { return lock.Get(ctx, "lock:x").Err() }},
		{"redlock PTTL lock:x", func() error { return lock.PTTL(ctx, "lock:x").Err() }},
		{"redlock PEXPIRE lock:x", func() error { return lock.PExpire(ctx, "lock:x", 10*time.Second).Err() }},
		{"redlock EVALSHA extend (EVAL on NOSCRIPT)", func() error {
			return extendScript.Run(ctx, lock, []string{"lock:x"}, "tok", 20000).Err()
		}},
		{"redlock SCRIPT LOAD", func() error { return releaseScript.Load(ctx, lock).Err() }},
		{"redlock EVALSHA release", func() error { return releaseScript.EvalSha(ctx, lock, []string{"lock:x"}, "tok").Err() }},
		{"redlock DEL lock:y", func() error { return lock.Del(ctx, "lock:y").Err() }},
		{"redlock PING", func() error { return lock.Ping(ctx).Err() }},
		{"redlock TIME", func() error { return lock.Time(ctx).Err() }},
		{"monitor INFO", func() error { return monitor.Info(ctx).Err() }},
		{"monitor CONFIG GET", func() error { return monitor.ConfigGet(ctx, "appendfsync").Err() }},
		{"monitor TIME", func() error { return monitor.Time(ctx).Err() }},
		{"monitor CLIENT LIST", func() error { return monitor.ClientList(ctx).Err() }},
		{"monitor SLOWLOG GET", func() error { return monitor.SlowLogGet(ctx, 10).Err() }},
		{"monitor LATENCY LATEST", func() error { return monitor.Do(ctx, "latency", "latest").Err() }},
		{"monitor ROLE", func() error { return monitor.Do(ctx, "role").Err() }},
	}
	for _, c := range allowed {
		if err := c.run(); err != nil {
			t.Errorf("%s: got %v, want it allowed", c.name, err)
		}
	}

	denied := []struct {
		name string
		run  func() error
	}{
		{"anonymous PING", func() error { return anonymous.Ping(ctx).Err() }},
		{"redlock SET foo", func() error { return lock.Set(ctx, "foo", "x", 0).Err() }},
		{"redlock GET foo", func() error { return lock.Get(ctx, "foo").Err() }},
		{"redlock FLUSHALL", func() error { return lock.FlushAll(ctx).Err() }},
		{"redlock KEYS", func() error { return lock.Keys(ctx, "*").Err() }},
		{"redlock CONFIG SET", func() error { return lock.ConfigSet(ctx, "appendfsync", "no").Err() }},
		{"redlock REPLICAOF", func() error { return lock.Do(ctx, "replicaof", "127.0.0.1", "1").Err() }},
		{"redlock EVAL touching foo", func() error {
			return lock.Eval(ctx, `return redis.call("set", "foo", "x")`, []string{"lock:x"}).Err()
		}},
		{"monitor SET lock:x", func() error { return monitor.Set(ctx, "lock:x", "x", 0).Err() }},
		{"monitor GET lock:x", func() error { return monitor.Get(ctx, "lock:x").Err() }},
		{"monitor CONFIG SET", func() error { return monitor.ConfigSet(ctx, "appendfsync", "no").Err() }},
		{"monitor SHUTDOWN", func() error { return monitor.Do(ctx, "shutdown", "nosave").Err() }},
		{"monitor FLUSHALL", func() error { return monitor.FlushAll(ctx).Err() }},
	}
	for _, c := range denied {
		err := c.run()
		// A denial inside a script comes back as a script error, not NOPERM.
		scriptDenied := redis.HasErrorPrefix(err, "The user executing the script can't")
		if !redis.IsPermissionError(err) && !redis.IsAuthError(err) && !scriptDenied {
			t.Errorf("%s: got %v, want it denied (NOPERM, NOAUTH or a script ACL error)", c.name, err)
		}
	}
	if err := anonymous.Do(ctx, "auth", "default", "").Err(); err == nil {
		t.Error("AUTH default with an empty password: got success, want the default user off")
	}
	if _, err := redis.NewClient(&redis.Options{Addr: opts.Addr, TLSConfig: opts.TLSConfig, Username: "redlock", Password: "wrong-password-0000"}).Ping(ctx).Result(); !redis.IsAuthError(err) {
		t.Errorf("redlock with a wrong password: got %v, want an auth error", err)
	}
}

func userClient(t *testing.T, base *redis.Options, user, password string) *redis.Client {
	t.Helper()
	opts := *base
	opts.Username, opts.Password = user, password
	c := redis.NewClient(&opts)
	t.Cleanup(func() { c.Close() })
	return c
}

// writeTLSFiles writes a CA and a server certificate for 127.0.0.1 into dir
// (the paths the tls profile renders) and returns a client config trusting
// the CA.
func writeTLSFiles(t *testing.T, dir string) *tls.Config {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey, nodeKey := newKey(), newKey()
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redlab test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	nodeTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	nodeDER, err := x509.CreateCertificate(rand.Reader, nodeTmpl, ca, &nodeKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(nodeKey)
	if err != nil {
		t.Fatal(err)
	}
	pemOf := func(typ string, der []byte) string {
		return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
	}
	writeFile(t, dir, "ca.crt", pemOf("CERTIFICATE", caDER), 0o644)
	writeFile(t, dir, "node.crt", pemOf("CERTIFICATE", nodeDER), 0o644)
	writeFile(t, dir, "node.key", pemOf("PRIVATE KEY", keyDER), 0o600)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
}

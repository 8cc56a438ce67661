package inventory

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/redlocklab/redlocklab/inventory/internal/foreign"
	"github.com/redlocklab/redlocklab/redlock/nodeaddr"
)

// adapter is how a foreign guard's adapter is found: a Node.js script in
// a directory of the repository's inventory/foreign (its package.json
// installed by `npm ci`), run by node, unless the variable env names
// another executable. args follow either.
type adapter struct {
	dir, script string
	args        []string
	env         string
}

// The adapters of the foreign guards.
var (
	nodeRedlockAdapter    = adapter{dir: "node-redlock", script: "adapter.js", env: "REDLAB_NODE_REDLOCK_ADAPTER"}
	nodeRedlockDelAdapter = adapter{dir: "node-redlock", script: "adapter.js", env: "REDLAB_NODE_REDLOCK_ADAPTER",
		args: []string{"--release-with-del"}}
)

// adapterDir is where the adapters live in the repository.
const adapterDir = "inventory/foreign"

// command is the adapter's argv: the executable in $env, else node and the
// script, found under the working directory's or this executable's
// repository, with its npm packages installed.
func (a adapter) command() ([]string, error) {
	if p := os.Getenv(a.env); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			return nil, fmt.Errorf("%s=%s is not an executable: %w", a.env, p, err)
		}
		return append([]string{p}, a.args...), nil
	}
	rel := filepath.Join(adapterDir, a.dir, a.script)
	script, err := findUp(rel)
	if err != nil {
		return nil, fmt.Errorf("no %s above the working directory or this executable (run from the repository, or set %s): %w", rel, a.env, err)
	}
	dir := filepath.Dir(script)
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		return nil, fmt.Errorf("%s has no node_modules: install its packages with `npm ci --prefix %s` (scripts/setup.sh test does)", dir, dir)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("the adapter %s runs on node, which is not on PATH (scripts/setup.sh test installs nodejs): %w", script, err)
	}
	return append([]string{node, script}, a.args...), nil
}

// findUp returns the absolute path of rel in the nearest directory holding
// it above the working directory, else above this executable's.
func findUp(rel string) (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, s := range starts {
		for d := s; ; d = filepath.Dir(d) {
			p := filepath.Join(d, rel)
			if _, err := os.Stat(p); err == nil {
				return filepath.Abs(p)
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", os.ErrNotExist
}

// AdapterConfig is what a foreign guard's adapter is started with (see
// inventory/foreign/README.md for what it is told).
type AdapterConfig struct {
	// Nodes are the lock nodes, host:port; TLS makes them rediss:// nodes,
	// verified with TLSFiles.
	Nodes    []string
	TLS      bool
	TLSFiles nodeaddr.TLSFiles
	// Username and Password log in to the nodes.
	Username, Password string
	// LogFile receives the adapter's stderr, appended (empty: this
	// process's stderr).
	LogFile string
}

// WithAdapter is what the foreign guards' adapter is started with.
func WithAdapter(c AdapterConfig) ServiceOption {
	return func(cfg *serviceConfig) { cfg.adapter = &c }
}

// foreignGuard is a guard whose lock is a foreign client's, run as an
// adapter speaking the protocol of inventory/foreign/README.md: the
// critical section of GuardRedlock (acquire, read, write, release in a
// deferred call), with the lock's validity as the adapter claimed it.
type foreignGuard struct {
	s   *Service
	c   *foreign.Client
	log *os.File // nil when the adapter writes to this process's stderr
}

// foreignGuardOf is the build of a foreign guard run as a.
func foreignGuardOf(a adapter) func(*Service) (guard, error) {
	return func(s *Service) (guard, error) { return newForeignGuard(s, a) }
}

func newForeignGuard(s *Service, a adapter) (guard, error) {
	ac := s.cfg.adapter
	if ac == nil || len(ac.Nodes) == 0 {
		return nil, fmt.Errorf("inventory: guard %s needs lock nodes for its adapter (WithAdapter)", s.guard)
	}
	argv, err := a.command()
	if err != nil {
		return nil, fmt.Errorf("inventory: guard %s: %w", s.guard, err)
	}
	g := &foreignGuard{s: s}
	var stderr io.Writer = os.Stderr
	if ac.LogFile != "" {
		if g.log, err = os.OpenFile(ac.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			return nil, fmt.Errorf("inventory: guard %s: adapter log: %w", s.guard, err)
		}
		stderr = g.log
	}
	g.c, err = foreign.Start(foreign.Config{
		Name: string(s.guard), Command: argv, Nodes: nodeaddr.List{Addrs: ac.Nodes, TLS: ac.TLS}, TLSFiles: ac.TLSFiles,
		Username: ac.Username, Password: ac.Password, Stderr: stderr,
	})
	if err != nil {
		if g.log != nil {
			g.log.Close()
		}
		return nil, fmt.Errorf("inventory: guard %s: %w", s.guard, err)
	}
	return g, nil
}

func (g *foreignGuard) reserve(ctx context.Context, req Request) (Reservation, Timing, error) {
	return g.s.withForeign(ctx, req, g.c, func(ctx context.Context) (Reservation, error) {
		return g.s.readModifyWrite(ctx, req, writeBlind, 0)
	})
}

// ready reports whether the adapter still takes requests. It knows no
// node counts: the client behind it is not this process's.
func (g *foreignGuard) ready(context.Context) (int, int, error) {
	if err := g.c.Err(); err != nil {
		return 0, 0, fmt.Errorf("inventory: guard %s: %w", g.s.guard, err)
	}
	return 0, 0, nil
}

func (g *foreignGuard) close() error {
	err := g.c.Close()
	if g.log != nil {
		err = errors.Join(err, g.log.Close())
	}
	if err != nil {
		return fmt.Errorf("inventory: guard %s: %w", g.s.guard, err)
	}
	return nil
}

// withForeign is the classic critical section through the adapter c:
// acquire within the acquire timeout, run body, release in a deferred
// call. The hold's ValidUntil is the grant's Deadline: the acquire's send
// time plus the validity the client claimed.
func (s *Service) withForeign(ctx context.Context, req Request, c *foreign.Client, body func(context.Context) (Reservation, error)) (r Reservation, t Timing, err error) {
	key := lockKey(req.SKU)
	actx, cancel := context.WithTimeout(ctx, s.cfg.acquireTimeout)
	start := time.Now()
	g, err := c.Acquire(actx, key, s.cfg.ttl)
	cancel()
	t.Acquire = time.Since(start)
	if err != nil {
		var ae *foreign.AnswerError
		if errors.As(err, &ae) {
			t.Attempts = ae.Attempts
		}
		return Reservation{}, t, s.foreignError(ctx, err)
	}
	t.Attempts = max(g.Attempts, 1)
	granted := time.Now()
	defer func() {
		released := time.Now()
		t.Hold = released.Sub(granted)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		// As with Redlock, a release that finds the lock expired or taken
		// over is not this reservation's failure.
		_ = c.Release(rctx, key, g.Token)
		cancel()
		t.Release = time.Since(released)
		s.observe(Hold{Key: key, Holder: s.cfg.holder, Token: g.Token, Granted: granted, Released: released, ValidUntil: g.Deadline()})
	}()
	r, err = body(ctx)
	return r, t, err
}

// foreignError translates a failed acquire through an adapter into the
// package's errors. An adapter that gave no answer within the acquire
// timeout is unavailable: its client was still waiting on its nodes (a
// client that retries on contention answers when its retries run out).
func (s *Service) foreignError(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("inventory: acquire lock: %w", ctx.Err())
	case errors.Is(err, foreign.ErrContended):
		return fmt.Errorf("%w: %s: %w", ErrContended, s.guard, err)
	case errors.Is(err, foreign.ErrUnavailable):
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, s.guard, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %s: the adapter gave no answer within the acquire timeout of %v", ErrUnavailable, s.guard, s.cfg.acquireTimeout)
	default:
		return fmt.Errorf("inventory: guard %s: %w", s.guard, err)
	}
}

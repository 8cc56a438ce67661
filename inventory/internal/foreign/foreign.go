// Package foreign runs a lock client written outside this repository, its
// adapter, as a subprocess, and speaks the foreign lock client protocol to
// it: one JSON object a line, requests on the adapter's stdin, answers on
// its stdout in any order, matched by id. The protocol as an adapter's
// author reads it (messages, fields, error classes, lifecycle,
// environment) is inventory/foreign/README.md; this package is the one
// reader and writer of it on the lab's side.
//
// A Client times what the lab needs and the adapter cannot: a grant's
// Sent is taken before the request is handed to the adapter, so the
// lab's Deadline (Sent plus the validity the adapter claimed, counted from
// when it read the request) is never later than the client's own.
package foreign

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redlocklab/redlocklab/redlock/nodeaddr"
)

// Protocol is the protocol version an adapter's hello must name.
const Protocol = 1

// Defaults of Config.
const (
	DefaultStartTimeout = 15 * time.Second
	DefaultStopTimeout  = 5 * time.Second
)

// maxLine bounds one line of the adapter's output.
const maxLine = 1 << 20

// The environment an adapter is started with (Config.env): the lock nodes
// as nodeaddr writes them, the login, and the TLS files for rediss://
// nodes. Nothing else named REDLAB_* is passed on.
const (
	EnvNodes         = "REDLAB_NODES"
	EnvUsername      = "REDLAB_USERNAME"
	EnvPassword      = "REDLAB_PASSWORD"
	EnvTLSCA         = "REDLAB_TLS_CA"
	EnvTLSCert       = "REDLAB_TLS_CERT"
	EnvTLSKey        = "REDLAB_TLS_KEY"
	EnvTLSServerName = "REDLAB_TLS_SERVER_NAME"
)

// Config is how an adapter is started.
type Config struct {
	// Name names the adapter in errors (the guard's name).
	Name string
	// Command is the adapter's argv.
	Command []string
	// Nodes are the lock nodes, with TLS set for rediss:// nodes, and
	// TLSFiles the PEM files and server name those are verified with.
	Nodes    nodeaddr.List
	TLSFiles nodeaddr.TLSFiles
	// Username and Password log in to the nodes (empty: no AUTH).
	Username, Password string
	// Stderr receives the adapter's stderr (nil: discarded; its end is
	// kept for errors either way).
	Stderr io.Writer
	// StartTimeout bounds the wait for the hello (0: DefaultStartTimeout);
	// StopTimeout the wait for the adapter to exit once its input ended
	// (0: DefaultStopTimeout), after which it is killed.
	StartTimeout, StopTimeout time.Duration
}

// env is the adapter's environment: this process's, less every REDLAB_*
// variable, plus the protocol's.
func (cfg Config) env() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REDLAB_") {
			out = append(out, kv)
		}
	}
	out = append(out, EnvNodes+"="+cfg.Nodes.String())
	for _, v := range []struct{ name, value string }{
		{EnvUsername, cfg.Username}, {EnvPassword, cfg.Password},
		{EnvTLSCA, cfg.TLSFiles.CA}, {EnvTLSCert, cfg.TLSFiles.Cert}, {EnvTLSKey, cfg.TLSFiles.Key},
		{EnvTLSServerName, cfg.TLSFiles.ServerName},
	} {
		if v.value != "" {
			out = append(out, v.name+"="+v.value)
		}
	}
	return out
}

// Client is one running adapter. It is safe for concurrent use: requests
// are multiplexed by id over the one pipe. Close stops the adapter.
type Client struct {
	cfg    Config
	client string
	cmd    *exec.Cmd
	stderr *tail

	queue chan []byte   // request lines, written by the writer goroutine
	quit  chan struct{} // closed by Close: the writer ends the input
	hello chan string   // the hello's client name, once

	mu       sync.Mutex
	nextID   uint64
	pending  map[uint64]*call
	closing  bool
	err      error         // why the adapter takes no more requests
	dead     chan struct{} // closed when err is set
	exited   chan struct{} // closed when the process was waited for
	waitErr  error         // cmd.Wait's, read after exited
	wg       sync.WaitGroup
	stopOnce sync.Once
	stopErr  error
}

// call is one request awaiting its answer.
type call struct {
	op, key string
	ch      chan answer // one answer, sent under Client.mu
	// abandoned: its caller stopped waiting; a late grant is released.
	abandoned bool
}

// Start starts the adapter and waits for its hello (at most
// Config.StartTimeout). The adapter dies with this process (Pdeathsig)
// and lives in a process group of its own, which Close and a protocol
// violation kill as a whole.
func Start(cfg Config) (*Client, error) {
	if len(cfg.Command) == 0 {
		return nil, errors.New("foreign: no adapter command")
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("foreign: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("foreign: %w", err)
	}
	c := &Client{
		cfg: cfg, stderr: &tail{max: 2048},
		queue: make(chan []byte, 256), quit: make(chan struct{}), hello: make(chan string, 1),
		pending: map[uint64]*call{}, dead: make(chan struct{}), exited: make(chan struct{}),
	}
	c.cmd = exec.Command(cfg.Command[0], cfg.Command[1:]...)
	c.cmd.Env = cfg.env()
	c.cmd.Stdin, c.cmd.Stdout = inR, outW
	c.cmd.Stderr = c.stderr
	if cfg.Stderr != nil {
		c.cmd.Stderr = io.MultiWriter(cfg.Stderr, c.stderr)
	}
	c.cmd.WaitDelay = time.Second
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	started := make(chan error, 1)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		// Pdeathsig fires when the thread that started the child ends, not
		// the process: this goroutine keeps its thread until the child is
		// waited for, so no other goroutine's exit can take it down.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := c.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		c.waitErr = c.cmd.Wait()
		close(c.exited)
	}()
	err = <-started
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		c.wg.Wait()
		return nil, fmt.Errorf("foreign: start adapter %s: %w", cfg.Name, err)
	}
	c.wg.Add(2)
	go c.write(inW)
	go c.read(outR)

	timer := time.NewTimer(cfg.StartTimeout)
	defer timer.Stop()
	select {
	case c.client = <-c.hello:
		return c, nil
	case <-c.dead:
	case <-timer.C:
		c.fail(fmt.Errorf("foreign: adapter %s: no hello within %v; its stderr ends: %s", cfg.Name, cfg.StartTimeout, c.stderr))
		c.kill()
	}
	c.Close()
	return nil, c.Err()
}

// ClientName is what the adapter's hello says it runs (name, version).
func (c *Client) ClientName() string { return c.client }

// Pid is the adapter's process id (its process group's too).
func (c *Client) Pid() int { return c.cmd.Process.Pid }

// Err is why the adapter takes no more requests, nil while it does.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Grant is a lock the adapter's client granted (or extended).
type Grant struct {
	Token string
	// Sent is when the request was handed to the adapter, on this
	// process's clock (with a monotonic reading).
	Sent time.Time
	// Validity is what the adapter claimed, counted from when it read the
	// request.
	Validity time.Duration
	// Attempts the client made, as the adapter reported them (0: not said).
	Attempts int
}

// Deadline is when the lock's validity runs out on this process's clock:
// Sent plus Validity, which is never later than the client's own reading,
// since the adapter read the request after Sent.
func (g Grant) Deadline() time.Time { return g.Sent.Add(g.Validity) }

// Acquire asks the adapter's client for the lock on key for ttl. When ctx
// ends first the request is abandoned, and a grant that answers it later
// is released.
func (c *Client) Acquire(ctx context.Context, key string, ttl time.Duration) (Grant, error) {
	return c.grant(ctx, request{Op: opAcquire, Key: key, TTLMs: ttlMs(ttl)})
}

// Extend asks the adapter's client to extend the lock it granted with
// token to ttl from now.
func (c *Client) Extend(ctx context.Context, key, token string, ttl time.Duration) (Grant, error) {
	return c.grant(ctx, request{Op: opExtend, Key: key, Token: token, TTLMs: ttlMs(ttl)})
}

// Release asks the adapter's client to release the lock it granted with
// token.
func (c *Client) Release(ctx context.Context, key, token string) error {
	_, _, err := c.do(ctx, request{Op: opRelease, Key: key, Token: token})
	return err
}

func ttlMs(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

func (c *Client) grant(ctx context.Context, req request) (Grant, error) {
	a, sent, err := c.do(ctx, req)
	if err != nil {
		return Grant{}, err
	}
	return Grant{Token: a.Token, Sent: sent, Validity: time.Duration(*a.ValidityMs * float64(time.Millisecond)), Attempts: a.Attempts}, nil
}

// do sends req and waits for its answer, ctx or the adapter's end. It
// returns the answer of a granted or released lock, and when the request
// was handed over.
func (c *Client) do(ctx context.Context, req request) (answer, time.Time, error) {
	c.mu.Lock()
	if c.err != nil {
		defer c.mu.Unlock()
		return answer{}, time.Time{}, c.err
	}
	c.nextID++
	req.ID = c.nextID
	cl := &call{op: req.Op, key: req.Key, ch: make(chan answer, 1)}
	c.pending[req.ID] = cl
	c.mu.Unlock()
	line, err := json.Marshal(req)
	if err != nil {
		c.forget(req.ID)
		return answer{}, time.Time{}, fmt.Errorf("foreign: %w", err)
	}
	sent := time.Now()
	select {
	case c.queue <- append(line, '\n'):
	case <-ctx.Done():
		c.forget(req.ID)
		return answer{}, sent, ctx.Err()
	case <-c.dead:
		return answer{}, sent, c.Err()
	}
	select {
	case a := <-cl.ch:
		if !a.OK {
			return a, sent, &AnswerError{Op: req.Op, Class: a.Error, Message: a.Message, Attempts: a.Attempts}
		}
		return a, sent, nil
	case <-ctx.Done():
		c.abandon(req.ID, cl)
		return answer{}, sent, ctx.Err()
	case <-c.dead:
		return answer{}, sent, c.Err()
	}
}

// forget drops a request that was never handed to the adapter.
func (c *Client) forget(id uint64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// abandon marks a request whose caller stopped waiting. When its answer
// came already, a grant in it is released now.
func (c *Client) abandon(id uint64, cl *call) {
	c.mu.Lock()
	if _, ok := c.pending[id]; ok {
		cl.abandoned = true
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	select {
	case a := <-cl.ch:
		c.late(cl, a)
	default:
	}
}

// late handles the answer to an abandoned request: a grant nobody waits for
// is released, in the background (the reader must not wait on the writer).
func (c *Client) late(cl *call, a answer) {
	if cl.op != opAcquire || !a.OK {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.StopTimeout)
		defer cancel()
		_ = c.Release(ctx, cl.key, a.Token)
	}()
}

// fail records why the adapter takes no more requests (the first reason
// wins) and wakes every waiting caller.
func (c *Client) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = err
	close(c.dead)
	c.pending = map[uint64]*call{}
}

// kill ends the adapter's process group.
func (c *Client) kill() {
	if p := c.cmd.Process; p != nil {
		_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
	}
}

// write hands the queued request lines to the adapter until Close, then
// writes what is still queued and ends the adapter's input.
func (c *Client) write(w *os.File) {
	defer c.wg.Done()
	defer w.Close()
	for {
		select {
		case line := <-c.queue:
			if _, err := w.Write(line); err != nil {
				return // the adapter is gone: read reports why
			}
		case <-c.quit:
			for {
				select {
				case line := <-c.queue:
					if _, err := w.Write(line); err != nil {
						return
					}
				default:
					return
				}
			}
		}
	}
}

// read takes the hello and then every answer off the adapter's output
// until it ends; a line the protocol does not allow stops the adapter.
func (c *Client) read(r *os.File) {
	defer c.wg.Done()
	defer r.Close()
	br := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		line, err := readLine(br)
		if err == nil {
			if n == 1 {
				err = c.takeHello(line)
			} else {
				err = c.deliver(line)
			}
			if err == nil {
				continue
			}
		}
		if errors.Is(err, io.EOF) {
			c.fail(c.exitError())
			return
		}
		c.fail(&ProtocolError{Adapter: c.cfg.Name, Line: n, Text: clip(line), Err: err})
		c.kill()
		return
	}
}

// readLine is one line without its end, or an error for a line longer
// than maxLine; io.EOF when the output ended.
func readLine(br *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		frag, err := br.ReadSlice('\n')
		buf = append(buf, frag...)
		if len(buf) > maxLine {
			return buf[:200], fmt.Errorf("a line longer than %d bytes", maxLine)
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err != nil && len(buf) > 0:
			return buf, errors.New("the output ended inside a line")
		case err != nil:
			return nil, err
		}
		return bytes.TrimRight(buf, "\r\n"), nil
	}
}

// exitError says why the adapter's output ended: it exited (waited for,
// killed when it lingers), with the end of its stderr.
func (c *Client) exitError() error {
	select {
	case <-c.exited:
	case <-time.After(c.cfg.StopTimeout):
		c.kill()
		<-c.exited
	}
	return &ExitError{Adapter: c.cfg.Name, Err: c.waitErr, Stderr: c.stderr.String()}
}

func (c *Client) takeHello(line []byte) error {
	var h hello
	if err := json.Unmarshal(line, &h); err != nil {
		return fmt.Errorf("the first line must be the hello: %w", err)
	}
	if h.Protocol != Protocol {
		return fmt.Errorf("the hello names protocol %d, want %d", h.Protocol, Protocol)
	}
	c.hello <- h.Client
	return nil
}

// deliver hands an answer to the request it answers.
func (c *Client) deliver(line []byte) error {
	var a answer
	if err := json.Unmarshal(line, &a); err != nil {
		return fmt.Errorf("not an answer: %w", err)
	}
	if a.ID == nil {
		return errors.New("an answer without an id")
	}
	c.mu.Lock()
	cl, ok := c.pending[*a.ID]
	if !ok {
		c.mu.Unlock()
		return fmt.Errorf("an answer to id %d, which no request awaits (never sent, or answered before)", *a.ID)
	}
	if err := a.check(cl.op); err != nil {
		c.mu.Unlock()
		return err
	}
	delete(c.pending, *a.ID)
	abandoned := cl.abandoned
	if !abandoned {
		cl.ch <- a
	}
	c.mu.Unlock()
	if abandoned {
		c.late(cl, a)
	}
	return nil
}

// Close ends the adapter's input and waits for it to exit (at most
// Config.StopTimeout, then it is killed). Requests still waiting fail with
// ErrClosed. It returns why the adapter had stopped before, if it had, or
// that it had to be killed; it is idempotent.
func (c *Client) Close() error {
	c.stopOnce.Do(func() {
		c.mu.Lock()
		prior := c.err
		if c.err == nil {
			c.err = ErrClosed
			close(c.dead)
			c.pending = map[uint64]*call{}
		}
		c.mu.Unlock()
		close(c.quit)
		select {
		case <-c.exited:
		case <-time.After(c.cfg.StopTimeout):
			c.kill()
			<-c.exited
			if prior == nil {
				prior = fmt.Errorf("foreign: adapter %s did not exit within %v of the end of its input: killed", c.cfg.Name, c.cfg.StopTimeout)
			}
		}
		c.wg.Wait()
		c.stopErr = prior
	})
	return c.stopErr
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.b))
	if s == "" {
		return "(nothing)"
	}
	return s
}

func clip(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

package redlock

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// WithTLS makes each node client speak TLS with cfg (nil: plain TCP, the
// default). An empty cfg.ServerName is the host of the node's address, so
// that a certificate for 10.0.0.1 or redis-1.internal verifies as it would
// for redis-cli --tls. The nodes' certificates must verify: there is no
// option to skip verification, since a lock node an attacker can impersonate
// grants whatever it is asked. NewNodes gives a TLS client a dial timeout of
// at least MinTLSDialTimeout.
func WithTLS(cfg *tls.Config) NodeOption {
	return func(o *redis.Options) {
		o.TLSConfig = cfg
		o.Dialer = dialer(o)
	}
}

// ConnError is a connection to a node that failed before any command ran:
// a TLS handshake that failed, or a node that answered in the other
// protocol (a plain client at a TLS-only port, a TLS client at a plain
// one). Reason says what failed in plain words; Err is the underlying
// error (an x509 error, a tls.RecordHeaderError, io.EOF, …). Nothing was
// executed on the node, so a lock attempt that meets one has nothing to
// release there.
type ConnError struct {
	Addr string
	// TLS reports whether the client spoke TLS.
	TLS    bool
	Reason string
	Err    error
}

func (e *ConnError) Error() string {
	proto := "plain TCP"
	if e.TLS {
		proto = "TLS"
	}
	return fmt.Sprintf("redlock: node %s (%s): %s: %v", e.Addr, proto, e.Reason, e.Err)
}

// Unwrap returns Err, as a list: go-redis strips one level of a
// single-error wrapper from a failed connection set-up (errors.Unwrap),
// which would drop the explanation; errors.Is and errors.As see through
// both.
func (e *ConnError) Unwrap() []error { return []error{e.Err} }

// MinTLSDialTimeout is the least dial timeout NewNodes gives a TLS node
// client, whatever WithNodeTimeout says. A TLS dial is a TCP connect plus a
// handshake that costs both sides milliseconds of CPU, and a node's
// handshakes queue behind each other on its one thread: the dials that
// fill every client's idle pool (DefaultMinIdleConns) at start, or after a
// node restarted, arrive together, and under the 50 ms default node timeout
// the last of them time out on a busy machine and start over. These dials
// run in the background; a dial on a request's path is still bounded by the
// request's deadline (the node timeout), so an acquire waits no longer.
const MinTLSDialTimeout = time.Second

// goRedisDialTimeout is go-redis's default DialTimeout, for clients built
// without one (the redsync guard's): the options go-redis fills in are its
// own copy's, not the ones this package's dialer reads.
const goRedisDialTimeout = 5 * time.Second

// keepAlive is go-redis's own default TCP keep-alive, kept for the clients
// whose dialer this package replaces.
var keepAlive = net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3}

// dialer is the Dialer of a node client built with o: go-redis's own (a TCP
// dial bounded by DialTimeout, then the TLS handshake when o.TLSConfig is
// set), with the handshake bounded by the dial's context and its failures,
// and a plain connection's first reply, explained (see ConnError). It reads
// o when it dials, so options applied after it (WithNodeTimeout) count.
func dialer(o *redis.Options) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var plain plainProbe
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		timeout := o.DialTimeout
		if timeout <= 0 {
			timeout = goRedisDialTimeout
		}
		d := net.Dialer{Timeout: timeout, KeepAliveConfig: keepAlive}
		hctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		conn, err := d.DialContext(hctx, network, addr)
		if err != nil {
			return nil, err
		}
		if o.TLSConfig == nil {
			return newPlainConn(conn, addr), nil
		}
		cfg := o.TLSConfig
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(hctx); err != nil {
			conn.Close()
			reason := handshakeReason(err, cfg.ServerName)
			if timedOut(err) && ctx.Err() != context.Canceled && plain.speaksPlain(ctx, &d, network, addr, timeout) {
				reason = "the node answers plain-text PING on this port: it does not speak TLS (address it as host:port, or use the node's tls-port)"
			}
			return nil, &ConnError{Addr: addr, TLS: true, Reason: "TLS handshake failed: " + reason, Err: err}
		}
		plain.connected()
		if o.Protocol != 2 {
			// RESP3 (go-redis's default, the redsync guard's): when the
			// socket holds bytes, the pool peeks at a reply through the
			// connection to look for a push notification, with no
			// deadline. Through TLS those bytes may be a record that
			// carries no reply, a session ticket the node sent after the
			// handshake, and the peek then waits forever. So a RESP3
			// client keeps go-redis's own rule: no look below TLS.
			return tc, nil
		}
		return &tlsConn{Conn: tc}, nil
	}
}

// tlsConn is a TLS connection whose socket go-redis's pool may look at
// before it reuses the connection (SyscallConn), as it does for a plain
// one: a connection the node closed (it crashed or restarted) is then
// dropped before a command is sent on it, instead of failing that command
// with EOF. go-redis does not look below a *tls.Conn by itself, since
// pending bytes may be a TLS record rather than a reply: a connection that
// never ran a command holds the node's TLS 1.3 session tickets. Taken for a
// dead connection, each of those would be dropped and dialled again, and
// the pool keeps its idle connections topped up with new, unused ones: under
// load every acquire then paid a handshake, the CPU went to handshakes, the
// node timeouts fired and closed more connections (a lab's TLS drill lost
// most of its acquires that way). So before the pool looks, pending bytes
// go through TLS first (settle): records without data (tickets) are
// consumed, and only data or a close marks the connection dead. A RESP3
// client would peek at a reply through TLS itself, so it gets the bare
// *tls.Conn (see dialer). ConnectionState stays reachable through the
// embedded *tls.Conn.
type tlsConn struct {
	*tls.Conn
}

// settleWait bounds the read that consumes a connection's pending TLS
// records: they are in the socket already, so it only waits out the check
// for data after them, once per connection that had any.
const settleWait = time.Millisecond

func (c *tlsConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.NetConn().(syscall.Conn)
	if !ok {
		return nil, errors.New("redlock: connection has no socket")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	return settledRaw{RawConn: raw, c: c}, nil
}

// settledRaw is the socket of a tlsConn for the pool's look (Read).
type settledRaw struct {
	syscall.RawConn
	c *tlsConn
}

// errTLSData is an idle connection that held data or a close under TLS.
var errTLSData = errors.New("redlock: idle TLS connection holds data or a close")

// Read runs the pool's look at the socket once any TLS records waiting on
// it have gone through TLS.
func (r settledRaw) Read(f func(fd uintptr) bool) error {
	pending := false
	if err := r.RawConn.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, _ := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		pending = n > 0
		return true
	}); err != nil {
		return err
	}
	if pending && !r.c.settle() {
		return errTLSData
	}
	return r.RawConn.Read(f)
}

// settle reads through TLS what the socket holds, for settleWait at most:
// it reports false when that was data or the end of the connection (it is
// then not fit for reuse), true when only records without data (session
// tickets) were there.
func (c *tlsConn) settle() bool {
	_ = c.Conn.SetReadDeadline(time.Now().Add(settleWait))
	var b [1]byte
	n, err := c.Conn.Read(b[:])
	_ = c.Conn.SetReadDeadline(time.Time{})
	return n == 0 && timedOut(err)
}

func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// plainProbe finds out, once per node client, whether a node whose TLS
// handshake timed out is a plain Redis: a plain redis-server reads a
// ClientHello as the start of an inline command and waits for the rest, so
// the handshake only times out, as it would with a node that is down. The
// probe sends a plain PING on a connection of its own; a node that ever
// completed a handshake is not probed (it speaks TLS), and the verdict is
// kept, so a silent node costs one probe, not one per dial.
type plainProbe struct {
	mu    sync.Mutex
	done  bool // probed, or connected once
	plain bool
}

func (p *plainProbe) connected() {
	p.mu.Lock()
	p.done = true
	p.mu.Unlock()
}

func (p *plainProbe) speaksPlain(ctx context.Context, d *net.Dialer, network, addr string, timeout time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return p.plain
	}
	p.done = true
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		return false
	}
	p.plain = b[0] == '+' || b[0] == '-' // +PONG, or -NOAUTH from a node with ACLs
	return p.plain
}

// handshakeReason says in plain words why a TLS handshake with a node
// whose certificate should name serverName failed.
func handshakeReason(err error, serverName string) string {
	var (
		rh      tls.RecordHeaderError
		unknown x509.UnknownAuthorityError
		invalid x509.CertificateInvalidError
		host    x509.HostnameError
		op      *net.OpError
	)
	switch {
	case errors.As(err, &rh):
		return "the node answered in plain text, not TLS: this port does not speak TLS (address it as host:port, or use the node's tls-port)"
	case errors.As(err, &unknown):
		issuer := "an unknown issuer"
		if unknown.Cert != nil {
			issuer = fmt.Sprintf("%q", unknown.Cert.Issuer.String())
		}
		return fmt.Sprintf("the node's certificate is signed by %s, not by a CA this client trusts (wrong CA file?)", issuer)
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired && invalid.Cert != nil:
		if now := time.Now(); now.Before(invalid.Cert.NotBefore) {
			return fmt.Sprintf("the node's certificate is not valid before %s (a clock behind, or a certificate from the future)", invalid.Cert.NotBefore.UTC().Format(time.RFC3339))
		}
		return fmt.Sprintf("the node's certificate expired at %s: renew it", invalid.Cert.NotAfter.UTC().Format(time.RFC3339))
	case errors.As(err, &invalid):
		return "the node's certificate is not valid: " + invalid.Error()
	case errors.As(err, &host):
		return fmt.Sprintf("the node's certificate is for %s, not for %q (give the name it carries as the server name, or reissue it with this address)",
			certNames(host.Certificate), serverName)
	case errors.As(err, &op) && op.Op == "remote error":
		return fmt.Sprintf("the node refused the handshake (%v): it may require a client certificate signed by its CA, or a TLS version this client does not offer", op.Err)
	case timedOut(err):
		return "no handshake reply within the dial timeout: the port may be plain TCP (a plain Redis waits for more of what it takes for a command), or the node is overloaded"
	case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET):
		return "the node closed the connection during the handshake"
	}
	return "the handshake failed"
}

// certNames lists the names a certificate is valid for.
func certNames(c *x509.Certificate) string {
	if c == nil {
		return "no name"
	}
	var names []string
	names = append(names, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 && c.Subject.CommonName != "" {
		names = append(names, "CN "+c.Subject.CommonName+" only (no subject alternative names, which clients require)")
	}
	if len(names) == 0 {
		return "no name"
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// plainConn is a plain TCP connection that explains its first read: a
// TLS-only Redis port closes a connection that sends it plain text, or
// answers it with a TLS alert record, and go-redis alone reports only
// "EOF" or an invalid reply. After the first read it passes everything
// through.
type plainConn struct {
	net.Conn
	addr    string
	checked bool
	err     *ConnError // sticky: go-redis may read again after an error
	raw     syscall.RawConn
}

func (c *plainConn) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if c.checked {
		return c.Conn.Read(p)
	}
	n, err := c.Conn.Read(p)
	if n == 0 && err == nil {
		return n, err
	}
	c.checked = true
	switch {
	case n >= 2 && (p[0] == 0x15 || p[0] == 0x16) && p[1] == 0x03: // a TLS alert or handshake record
		c.err = &ConnError{Addr: c.addr, Reason: "the node answered with TLS: it is a TLS-only port (address it as rediss://host:port)",
			Err: fmt.Errorf("reply starts % x", p[:min(n, 5)])}
	case n == 0 && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)):
		c.err = &ConnError{Addr: c.addr, Reason: "the node closed the connection without a reply, as a TLS-only port does with plain text (address it as rediss://host:port if it speaks TLS)", Err: err}
	default:
		return n, err
	}
	return 0, c.err
}

// SyscallConn lets go-redis's pool look at the socket before it reuses a
// connection, as it does for a bare TCP connection.
func (c *plainConn) SyscallConn() (syscall.RawConn, error) {
	if c.raw == nil {
		return nil, errors.New("redlock: connection has no socket")
	}
	return c.raw, nil
}

// newPlainConn wraps conn. Its socket is looked up once: go-redis's pool
// asks for it before every request it sends on the connection.
func newPlainConn(conn net.Conn, addr string) *plainConn {
	c := &plainConn{Conn: conn, addr: addr}
	if sc, ok := conn.(syscall.Conn); ok {
		c.raw, _ = sc.SyscallConn()
	}
	return c
}

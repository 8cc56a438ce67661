//go:build linux

package faultproxy

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// echoServer is the upstream of these tests: a real TCP server that writes
// back what it reads, and closes its side once the client closed its own.
type echoServer struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func newEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{ln: ln}
	s.serve()
	t.Cleanup(s.close)
	return s
}

// serve accepts and echoes until close.
func (s *echoServer) serve() {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := s.ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
}

func (s *echoServer) addr() string { return s.ln.Addr().String() }

// dropAll closes every connection the server has, as a restarted server
// would.
func (s *echoServer) dropAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
	s.conns = nil
}

func (s *echoServer) close() {
	s.ln.Close()
	s.dropAll()
	s.wg.Wait()
}

func start(t *testing.T, upstream string) *Proxy {
	t.Helper()
	p, err := Listen("127.0.0.1:0", upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		t.Fatalf("dial the proxy: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads the echo within wait.
func roundTrip(c net.Conn, msg []byte, wait time.Duration) ([]byte, error) {
	c.SetDeadline(time.Now().Add(wait))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(msg); err != nil {
		return nil, err
	}
	got := make([]byte, len(msg))
	_, err := io.ReadFull(c, got)
	return got, err
}

func mustEcho(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	got, err := roundTrip(c, []byte(msg), 10*time.Second)
	if err != nil {
		t.Fatalf("echo of %q: %v", msg, err)
	}
	if string(got) != msg {
		t.Fatalf("echo: got %q, want %q", got, msg)
	}
}

func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// silent asserts that msg gets no answer on c: the read times out, the
// connection is neither refused nor closed.
func silent(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	_, err := roundTrip(c, []byte(msg), 200*time.Millisecond)
	if !isTimeout(err) {
		t.Fatalf("partitioned: got %v, want a read timeout (silence, not refusal)", err)
	}
}

func TestForwardsBytesBothWays(t *testing.T) {
	p := start(t, newEcho(t).addr())
	c := dial(t, p)
	mustEcho(t, c, "PING")
	// More than one read's worth, so that writes block and the
	// proxy has to hold and resume.
	big := make([]byte, 4<<20)
	rand.Read(big)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(big)
		errc <- err
	}()
	got := make([]byte, len(big))
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read the echo of 4 MiB: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("write 4 MiB: %v", err)
	}
	if !bytes.Equal(got, big) {
		t.Fatal("4 MiB echo: got different bytes")
	}
}

func TestHalfCloseReachesTheUpstream(t *testing.T) {
	p := start(t, newEcho(t).addr())
	c := dial(t, p).(*net.TCPConn)
	if _, err := c.Write([]byte("last words")); err != nil {
		t.Fatal(err)
	}
	// The echo server sees EOF only if the proxy passes the
	// half-close on; it then closes, and so must the proxy.
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read to EOF: %v", err)
	}
	if string(got) != "last words" {
		t.Errorf("got %q, want %q and EOF", got, "last words")
	}
}

func TestPartitionIsSilenceNotRefusal(t *testing.T) {
	p := start(t, newEcho(t).addr())
	open := dial(t, p)
	mustEcho(t, open, "before")
	quiet := dial(t, p)
	mustEcho(t, quiet, "before, quiet")

	p.Set(Fault{Partition: true})
	if got := p.Fault(); !got.Partition {
		t.Errorf("Fault: got %v, want partition", got)
	}
	// An open connection goes silent.
	silent(t, open, "during")
	// A new one is accepted, and goes silent too.
	fresh := dial(t, p)
	silent(t, fresh, "during, new")
	// One more arrives and sends nothing.
	waiting := dial(t, p)

	p.Set(Fault{})
	// What was sent during the partition is lost, and a stream with a
	// hole in it is one TCP never delivers: those connections end.
	closed(t, open, "a connection whose bytes the partition dropped")
	closed(t, fresh, "a connection made during the partition whose bytes it dropped")
	// A connection that sent nothing carries on, and the one that
	// arrived during the partition reaches the upstream now.
	mustEcho(t, quiet, "after")
	mustEcho(t, waiting, "after, new")
}

func TestPartitionHidesAnUpstreamThatLeft(t *testing.T) {
	up := newEcho(t)
	p := start(t, up.addr())
	c := dial(t, p)
	mustEcho(t, c, "hello")
	p.Set(Fault{Partition: true})
	up.dropAll()
	// Still silence: the client cannot tell the server left.
	silent(t, c, "anyone?")
	p.Set(Fault{})
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("after the partition: got %v, want the connection closed", err)
	}
}

func TestLatencyAppliesToOpenConnections(t *testing.T) {
	const add = 60 * time.Millisecond
	p := start(t, newEcho(t).addr())
	c := dial(t, p)
	mustEcho(t, c, "warm")
	p.Set(Fault{Latency: add})
	for i := range 3 {
		start := time.Now()
		mustEcho(t, c, fmt.Sprint("slow ", i))
		// A lower bound the proxy guarantees, not a timing.
		if got := time.Since(start); got < add {
			t.Errorf("round trip %d: got %v, want at least %v", i, got, add)
		}
	}
	// Removing the latency releases what it holds at once: the
	// echo of a message sent under a latency far longer than the
	// read deadline still arrives.
	p.Set(Fault{Latency: time.Hour})
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	// Give the echo time to come back and be held (if it is not
	// yet, it passes unheld and the check below holds anyway).
	time.Sleep(50 * time.Millisecond)
	p.Set(Fault{})
	got := make([]byte, 4)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "held" {
		t.Fatalf("held echo after the latency was removed: got %q, %v; want %q", got, err, "held")
	}
}

func TestLatencyKeepsOrderUnderJitter(t *testing.T) {
	p := start(t, newEcho(t).addr())
	c := dial(t, p)
	p.Set(Fault{Latency: 5 * time.Millisecond, Jitter: 4 * time.Millisecond})
	var want bytes.Buffer
	for i := range 50 {
		msg := fmt.Sprintf("<%d>", i)
		want.WriteString(msg)
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	got := make([]byte, want.Len())
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Errorf("got %q, want %q: chunks must keep their order", got, want.Bytes())
	}
}

func TestDelayIsWholeMillisecondsWithinJitter(t *testing.T) {
	for _, tc := range []struct {
		f      Fault
		lo, hi time.Duration
	}{
		{Fault{Latency: 20 * time.Millisecond}, 20 * time.Millisecond, 20 * time.Millisecond},
		{Fault{Latency: 20 * time.Millisecond, Jitter: 5 * time.Millisecond}, 15 * time.Millisecond, 25 * time.Millisecond},
		{Fault{Latency: 2 * time.Millisecond, Jitter: 10 * time.Millisecond}, 0, 12 * time.Millisecond},
		{Fault{Latency: 1500 * time.Microsecond}, time.Millisecond, time.Millisecond},
	} {
		t.Run(tc.f.String(), func(t *testing.T) {
			for range 1000 {
				d := tc.f.delay()
				if d < tc.lo || d > tc.hi || d%time.Millisecond != 0 {
					t.Fatalf("delay: got %v, want whole milliseconds in [%v, %v]", d, tc.lo, tc.hi)
				}
			}
		})
	}
}

func TestServiceTimeQueuesEveryConnection(t *testing.T) {
	const (
		service = 20 * time.Millisecond
		clients = 5
	)
	p := start(t, newEcho(t).addr())
	conns := make([]net.Conn, clients)
	for i := range conns {
		conns[i] = dial(t, p)
		mustEcho(t, conns[i], "warm")
	}
	p.Set(Fault{ServiceTime: service})
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := fmt.Sprint("req ", i)
			got, err := roundTrip(c, []byte(msg), 10*time.Second)
			if err == nil && string(got) != msg {
				err = fmt.Errorf("got %q, want %q", got, msg)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// One server: the five requests took their turns. A lower
	// bound, not a timing.
	if got, want := time.Since(start), clients*service; got < want {
		t.Errorf("%d requests through one %v server: took %v, want at least %v", clients, service, got, want)
	}
}

// downUpstream is an upstream address that refuses connections: a socket
// bound to it that does not listen, so that no other test can take the
// port. up makes it listen and echo, on the same address.
type downUpstream struct {
	t    *testing.T
	fd   int
	addr string
}

func newDownUpstream(t *testing.T) *downUpstream {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	d := &downUpstream{t: t, fd: fd, addr: fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)}
	t.Cleanup(func() {
		if d.fd >= 0 {
			syscall.Close(d.fd)
		}
	})
	return d
}

func (d *downUpstream) up() {
	d.t.Helper()
	if err := syscall.Listen(d.fd, syscall.SOMAXCONN); err != nil {
		d.t.Fatal(err)
	}
	f := os.NewFile(uintptr(d.fd), d.addr)
	d.fd = -1
	ln, err := net.FileListener(f) // dups the descriptor
	f.Close()
	if err != nil {
		d.t.Fatal(err)
	}
	s := &echoServer{ln: ln}
	s.serve()
	d.t.Cleanup(s.close)
}

// refusedOnce dials p and waits for the front to close the connection:
// its dial of the down upstream was refused, and it now refuses too.
func refusedOnce(t *testing.T, p *Proxy) {
	t.Helper()
	c := dial(t, p)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("upstream down: got %v, want the connection closed", err)
	}
}

func TestUpstreamDownIsRefused(t *testing.T) {
	up := newDownUpstream(t)
	p := start(t, up.addr)

	// The client accepted before the front knew is closed...
	refusedOnce(t, p)
	// ...and the next ones are refused, as the upstream refuses them.
	if _, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial after the upstream refused: got %v, want refused", err)
	}

	// The upstream comes back on its address: the front listens again.
	up.up()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
		if err == nil {
			defer c.Close()
			mustEcho(t, c, "back")
			return
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial while the upstream comes back: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the upstream answers again, but the front still refuses after 10 s (probe every %v)", ProbeInterval)
		}
		time.Sleep(ProbeInterval)
	}
}

func TestPartitionInFrontOfADownUpstreamIsSilence(t *testing.T) {
	p := start(t, newDownUpstream(t).addr)
	refusedOnce(t, p)
	p.Set(Fault{Partition: true})
	silent(t, dial(t, p), "anyone?")
}

func TestRefusingFrontClosesCleanly(t *testing.T) {
	p := start(t, newDownUpstream(t).addr)
	refusedOnce(t, p)
	// The probe runs now; Close must end it and release the port.
	addr := p.Addr()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the front's port after Close: %v", err)
	}
	ln.Close()
}

func TestCloseEndsEverything(t *testing.T) {
	p := start(t, newEcho(t).addr())
	c := dial(t, p)
	mustEcho(t, c, "hi")
	addr := p.Addr()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	p.Set(Fault{Partition: true}) // must not block or panic
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Errorf("open connection after Close: got %v, want it closed", err)
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial after Close: got %v, want refused", err)
	}
}

func TestListenErrors(t *testing.T) {
	p := start(t, "127.0.0.1:1")
	if _, err := Listen(p.Addr(), "127.0.0.1:1"); err == nil {
		t.Error("Listen on a port in use: got nil error")
	}
	if _, err := Listen("127.0.0.1:0", "no-such-host.invalid:1"); err == nil {
		t.Error("Listen with an unresolvable upstream: got nil error")
	}
}

//go:build linux

package faultproxy

import (
	"bufio"
	"errors"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"
)

// greeter accepts connections and writes name and a newline on each, then
// holds them open until the test ends.
func greeter(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	done := make(chan struct{})
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte(name + "\n"))
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return ln.Addr().String()
}

func greeting(t *testing.T, c net.Conn) (string, error) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	return bufio.NewReader(c).ReadString('\n')
}

// closed asserts that the proxy closed c.
func closed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Errorf("%s: read %d bytes, %v; want the connection closed", what, n, err)
	}
}

// TestSetUpstream: connections go to the current upstream; SetUpstream
// closes the ones forwarded so far and sends new ones to the new upstream,
// on the same address, with the fault in force kept.
func TestSetUpstream(t *testing.T) {
	a, b := greeter(t, "a"), greeter(t, "b")
	p := start(t, a)
	first := dial(t, p)
	if got, err := greeting(t, first); err != nil || got != "a\n" {
		t.Fatalf("before the switch: got %q, %v; want a", got, err)
	}
	addr := p.Addr()
	p.Set(Fault{Latency: 50 * time.Millisecond})
	if err := p.SetUpstream(b); err != nil {
		t.Fatal(err)
	}
	closed(t, first, "a connection forwarded before the switch")
	if got, err := greeting(t, dial(t, p)); err != nil || got != "b\n" || p.Addr() != addr {
		t.Errorf("after the switch: got %q, %v on %s; want b on the same address %s", got, err, p.Addr(), addr)
	}
	if f := p.Fault(); f.Latency != 50*time.Millisecond {
		t.Errorf("fault after the switch: got %v, want the latency kept", f)
	}
	if err := p.SetUpstream("no-such-host.invalid:1"); err == nil {
		t.Error("SetUpstream to an unresolvable address: got nil error")
	}
	if got, err := greeting(t, dial(t, p)); err != nil || got != "b\n" {
		t.Errorf("after a refused switch: got %q, %v; want b still", got, err)
	}
}

// TestSetUpstreamDuringPartition: a connection held silent by a partition
// is closed too, and after the heal new connections reach the new upstream.
func TestSetUpstreamDuringPartition(t *testing.T) {
	a, b := greeter(t, "a"), greeter(t, "b")
	p := start(t, a)
	held := dial(t, p)
	if got, err := greeting(t, held); err != nil || got != "a\n" {
		t.Fatalf("before the partition: got %q, %v; want a", got, err)
	}
	p.Set(Fault{Partition: true})
	if err := p.SetUpstream(b); err != nil {
		t.Fatal(err)
	}
	closed(t, held, "a connection held by the partition")
	p.Set(Fault{})
	if got, err := greeting(t, dial(t, p)); err != nil || got != "b\n" {
		t.Errorf("after the heal: got %q, %v; want b", got, err)
	}
}

// TestSetUpstreamEndsARefusal: a front that refuses because its upstream
// is down (the crashed master) listens again once pointed at one that
// answers (the promoted replica).
func TestSetUpstreamEndsARefusal(t *testing.T) {
	p := start(t, newDownUpstream(t).addr)
	refusedOnce(t, p)
	if _, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial with the upstream down: got %v, want refused", err)
	}
	if err := p.SetUpstream(greeter(t, "b")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
		if err == nil {
			defer c.Close()
			if got, err := greeting(t, c); err != nil || got != "b\n" {
				t.Errorf("after the switch: got %q, %v; want b", got, err)
			}
			return
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial after the switch: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new upstream answers, but the front still refuses after 10 s (probe every %v)", ProbeInterval)
		}
		time.Sleep(ProbeInterval)
	}
}

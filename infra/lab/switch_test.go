package lab

import (
	"bufio"
	"net"
	"sync"
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

// TestSwitcher: connections go to the current upstream; a switch closes the
// ones relayed so far and sends new ones to the new upstream, on the same
// address; stop ends everything and is idempotent.
func TestSwitcher(t *testing.T) {
	a, b := greeter(t, "a"), greeter(t, "b")
	sw, err := startSwitcher(a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sw.stop)
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", sw.addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	first := dial()
	if got, err := greeting(t, first); err != nil || got != "a\n" {
		t.Fatalf("before the switch: got %q, %v; want a", got, err)
	}
	addr := sw.addr()
	sw.switchTo(b)
	first.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := first.Read(make([]byte, 1)); err == nil {
		t.Errorf("a connection relayed before the switch: read %d bytes, want it closed", n)
	}
	if got, err := greeting(t, dial()); err != nil || got != "b\n" || sw.addr() != addr {
		t.Errorf("after the switch: got %q, %v on %s; want b on the same address %s", got, err, sw.addr(), addr)
	}
	sw.stop()
	sw.stop()
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Error("the switch still accepts after stop")
	}
}

package lab

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// switcher is a TCP relay on a kernel-chosen loopback port whose upstream
// can change while it keeps listening. A replicated node's fronts lead to it
// (a front's upstream is fixed while it listens, and restarting its
// listener to change it would give the node's address away for a moment):
// a failover switches the upstream and closes the connections relayed so
// far, so that clients reconnect to the new master, as behind Sentinel or a
// managed endpoint.
type switcher struct {
	ln net.Listener

	mu     sync.Mutex
	target string
	conns  map[net.Conn]struct{}
	closed bool

	wg sync.WaitGroup
}

// switchDialTimeout bounds a relayed connection's dial to its upstream.
const switchDialTimeout = time.Second

func startSwitcher(upstream string) (*switcher, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("lab: switch: %w", err)
	}
	s := &switcher{ln: ln, target: upstream, conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

// addr is where the switcher listens.
func (s *switcher) addr() string { return s.ln.Addr().String() }

// switchTo sends new connections to upstream and closes the ones relayed
// so far.
func (s *switcher) switchTo(upstream string) {
	s.mu.Lock()
	s.target = upstream
	old := s.conns
	s.conns = map[net.Conn]struct{}{}
	s.mu.Unlock()
	for c := range old {
		c.Close()
	}
}

// stop closes the listener and every relayed connection and waits for the
// relays to end. Idempotent.
func (s *switcher) stop() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	s.ln.Close()
	s.switchTo("")
	s.wg.Wait()
}

func (s *switcher) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.relay(c)
		}()
	}
}

// relay connects c to the current upstream until either side ends or the
// upstream is switched.
func (s *switcher) relay(c net.Conn) {
	s.mu.Lock()
	target, closed := s.target, s.closed
	s.mu.Unlock()
	if closed || target == "" {
		c.Close()
		return
	}
	up, err := net.DialTimeout("tcp", target, switchDialTimeout)
	if err != nil {
		c.Close()
		return
	}
	s.mu.Lock()
	if s.closed || s.target != target {
		// Switched (or stopped) while dialling: this one is stale.
		s.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	s.conns[c], s.conns[up] = struct{}{}, struct{}{}
	s.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	c.Close()
	up.Close()
	<-done
	s.mu.Lock()
	delete(s.conns, c)
	delete(s.conns, up)
	s.mu.Unlock()
}

//go:build linux

package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Proxy forwards the connections it accepts to one upstream address. Its
// methods are safe for concurrent use.
type Proxy struct {
	addr     string
	listenSA unix.Sockaddr
	family   int       // the listener's
	base     time.Time // the loop's clock: time since base

	// next is the upstream new connections go to, as SetUpstream left it;
	// the loop adopts it as up on its next wake-up, and the probe dials it.
	next atomic.Pointer[upstreamAddr]

	// While the upstream refuses, the front does not listen and a probe
	// dials the upstream until it answers; then it sets reopen and wakes
	// the loop, which listens again. probeCtx ends the probe on Close.
	reopen    atomic.Bool
	probes    sync.WaitGroup
	probeCtx  context.Context
	probeStop context.CancelFunc

	fault   atomic.Pointer[Fault]
	closing atomic.Bool
	done    chan struct{}
	acks    chan struct{} // the loop has applied the fault of a Set
	setMu   sync.Mutex    // one Set at a time: each waits for its ack
	// wakeMu guards wakeFD against Close: a write to a closed descriptor
	// could land in whatever reused its number.
	wakeMu    sync.Mutex
	wakeFD    int
	closeOnce sync.Once

	// Everything below belongs to the loop goroutine.
	up          *upstreamAddr // where dial connects
	epfd, lfd   int
	ends        map[uint32]*end
	nextID      uint32
	links       map[*link]struct{}
	timed       map[*link]struct{} // links with queued chunks or a dial under way
	applied     Fault              // the fault the links are set up for
	busyUntil   time.Duration      // the ServiceTime queue's next free moment
	acceptAfter time.Duration      // accepting paused after an error (EMFILE), until then
	refusing    bool               // the upstream refused: the front does not listen
	probing     bool               // a probe runs
	buf         []byte
	events      []unix.EpollEvent
}

// Event IDs of the loop's own descriptors; connection ends count from
// firstEndID. IDs, not descriptors, travel in epoll events, so an event
// for a connection closed earlier in the same batch can never reach a new
// connection that reused its descriptor.
const (
	idListener uint32 = iota + 1
	idWake
	firstEndID
)

const (
	readSize = 64 << 10
	// maxQueued bounds what a direction of a connection holds back
	// (latency, service time, a slow reader) before it stops reading.
	maxQueued = 1 << 20
	// acceptPause is how long accepting pauses after a failure other than
	// a vanished client (out of file descriptors): level-triggered epoll
	// would otherwise report the listener again at once.
	acceptPause = 10 * time.Millisecond
	// ProbeInterval is how often a front whose upstream refused dials the
	// upstream, to listen again once it answers.
	ProbeInterval = 20 * time.Millisecond
)

// upstreamAddr is a resolved upstream.
type upstreamAddr struct {
	sa     unix.Sockaddr
	family int
	addr   string // for the probe's dial
}

func resolveUpstream(upstream string) (*upstreamAddr, error) {
	a, err := net.ResolveTCPAddr("tcp", upstream)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: upstream %q: %w", upstream, err)
	}
	sa, family := sockaddr(a)
	return &upstreamAddr{sa: sa, family: family, addr: a.String()}, nil
}

// end is one socket of a link.
type end struct {
	id       uint32
	fd       int
	link     *link
	interest uint32 // the events registered with epoll
}

type direction uint8

const (
	upstream   direction = iota // client to server
	downstream                  // server to client
)

// link is one client connection and its upstream connection.
type link struct {
	client, server *end // server is nil until dialled, and after it went away in a partition
	dialing        bool
	dialDeadline   time.Duration
	serverGone     bool // the upstream closed during a partition, unannounced
	// lost: a partition dropped bytes of this link, either way. The
	// stream has a hole in it, so the link is closed when the partition
	// ends (see Fault.Partition).
	lost     bool
	up, down half
}

// half is one direction of a link.
type half struct {
	dir     direction
	queue   []chunk // held back, in order; the head is written first
	queued  int     // bytes in queue
	blocked bool    // the destination would block: wait until it is writable
	eof     bool    // the source ended
	shut    bool    // the destination was shut down for writing
}

type chunk struct {
	b   []byte
	due time.Duration // since Proxy.base; 0: at once
}

// Listen starts a proxy on addr (host:port; port 0 picks a free one)
// forwarding to upstream, which is resolved once, now (SetUpstream changes
// it). Close it to stop it.
func Listen(addr, upstream string) (*Proxy, error) {
	up, err := resolveUpstream(upstream)
	if err != nil {
		return nil, err
	}
	at, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen address %q: %w", addr, err)
	}
	p := &Proxy{
		base: time.Now(),
		done: make(chan struct{}),
		acks: make(chan struct{}, 1),
		epfd: -1, lfd: -1, wakeFD: -1,
		ends:   map[uint32]*end{},
		nextID: firstEndID,
		links:  map[*link]struct{}{},
		timed:  map[*link]struct{}{},
		buf:    make([]byte, readSize),
		events: make([]unix.EpollEvent, 128),
	}
	p.fault.Store(&Fault{})
	p.up = up
	p.next.Store(up)
	p.probeCtx, p.probeStop = context.WithCancel(context.Background())
	if err := p.open(at); err != nil {
		p.closeFDs()
		unix.Close(p.wakeFD)
		return nil, err
	}
	go p.loop()
	return p, nil
}

// sockaddr converts a resolved TCP address for the socket calls.
func sockaddr(a *net.TCPAddr) (unix.Sockaddr, int) {
	if ip4 := a.IP.To4(); ip4 != nil || a.IP == nil {
		sa := &unix.SockaddrInet4{Port: a.Port}
		if ip4 != nil {
			copy(sa.Addr[:], ip4)
		}
		return sa, unix.AF_INET
	}
	sa := &unix.SockaddrInet6{Port: a.Port}
	copy(sa.Addr[:], a.IP.To16())
	if a.Zone != "" {
		if ifi, err := net.InterfaceByName(a.Zone); err == nil {
			sa.ZoneId = uint32(ifi.Index)
		}
	}
	return sa, unix.AF_INET6
}

// open creates the listener, the wake-up eventfd and the epoll set.
func (p *Proxy) open(at *net.TCPAddr) error {
	var sa unix.Sockaddr
	sa, p.family = sockaddr(at)
	var err error
	if p.lfd, err = bindSocket(p.family, sa); err != nil {
		return fmt.Errorf("faultproxy: listen on %s: %w", at, err)
	}
	if err := unix.Listen(p.lfd, unix.SOMAXCONN); err != nil {
		return fmt.Errorf("faultproxy: listen on %s: %w", at, err)
	}
	bound, err := unix.Getsockname(p.lfd)
	if err != nil {
		return fmt.Errorf("faultproxy: listen on %s: %w", at, err)
	}
	p.listenSA = bound
	switch b := bound.(type) {
	case *unix.SockaddrInet4:
		p.addr = net.JoinHostPort(net.IP(b.Addr[:]).String(), fmt.Sprint(b.Port))
	case *unix.SockaddrInet6:
		p.addr = net.JoinHostPort(net.IP(b.Addr[:]).String(), fmt.Sprint(b.Port))
	}
	if p.wakeFD, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		return fmt.Errorf("faultproxy: eventfd: %w", err)
	}
	if p.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return fmt.Errorf("faultproxy: epoll: %w", err)
	}
	for _, r := range []struct {
		fd int
		id uint32
	}{{p.lfd, idListener}, {p.wakeFD, idWake}} {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(r.id)}
		if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, r.fd, &ev); err != nil {
			return fmt.Errorf("faultproxy: epoll: %w", err)
		}
	}
	return nil
}

// closeFDs closes the listener and the epoll set (the wake-up eventfd is
// Close's).
func (p *Proxy) closeFDs() {
	for _, fd := range []*int{&p.lfd, &p.epfd} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

// Addr is the address clients connect to.
func (p *Proxy) Addr() string { return p.addr }

// Fault returns the fault in force.
func (p *Proxy) Fault() Fault { return *p.fault.Load() }

// Set puts f in force, on new and open connections alike; negative
// durations count as zero. It returns once the proxy applies it: a byte a
// client sends after that meets f. What the previous fault held back
// (latency, service time) goes out at once, unless f is a partition, which
// drops it. On a closed Proxy it does nothing.
func (p *Proxy) Set(f Fault) {
	p.setMu.Lock()
	defer p.setMu.Unlock()
	f = f.normal()
	p.fault.Store(&f)
	p.awaitLoop()
}

// SetUpstream sends the connections accepted from now on to upstream
// (resolved now) and closes every connection open so far, both ways, as a
// client behind Sentinel or a managed endpoint sees a failover: its
// connection to the old master ends, and it reconnects, on the same address,
// to the new one. The listener and the fault in force stay. A front that
// refuses because the old upstream did listens again once the new one
// answers. It returns once the proxy applies it; on a closed Proxy it does
// nothing.
func (p *Proxy) SetUpstream(upstream string) error {
	up, err := resolveUpstream(upstream)
	if err != nil {
		return err
	}
	p.setMu.Lock()
	defer p.setMu.Unlock()
	p.next.Store(up)
	p.awaitLoop()
	return nil
}

// awaitLoop wakes the loop and waits until it has applied the fault and
// the upstream in force. The caller holds setMu.
func (p *Proxy) awaitLoop() {
	if !p.wake() {
		return
	}
	select {
	case <-p.acks:
	case <-p.done:
	}
}

// wake rouses the loop; false when the proxy is closed.
func (p *Proxy) wake() bool {
	p.wakeMu.Lock()
	defer p.wakeMu.Unlock()
	if p.wakeFD < 0 {
		return false
	}
	one := [8]byte{1}
	// EAGAIN means the counter is already non-zero: the loop will wake.
	_, _ = unix.Write(p.wakeFD, one[:])
	return true
}

// Close stops accepting, closes every connection and waits for the loop to
// end. It is idempotent.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.closing.Store(true)
		p.wake()
		<-p.done
		p.probeStop()
		p.probes.Wait()
		p.wakeMu.Lock()
		unix.Close(p.wakeFD)
		p.wakeFD = -1
		p.wakeMu.Unlock()
	})
	<-p.done
	return nil
}

func (p *Proxy) now() time.Duration { return time.Since(p.base) }

// loop is the proxy: it waits for the sockets and the timers, and does what
// they ask, until Close.
func (p *Proxy) loop() {
	defer close(p.done)
	defer func() {
		for l := range p.links {
			p.closeLink(l)
		}
		p.closeFDs()
	}()
	for {
		n, err := p.wait(p.timeout())
		if err != nil && !errors.Is(err, unix.EINTR) {
			// The epoll set itself failed: nothing can be forwarded any
			// more. Closing every connection is the honest answer.
			return
		}
		batch := p.events[:max(n, 0)]
		// A new fault first: whatever a client sent after Set returned
		// must meet it, even when it arrived in the same batch.
		for _, ev := range batch {
			if uint32(ev.Fd) != idWake {
				continue
			}
			var b [8]byte
			_, _ = unix.Read(p.wakeFD, b[:])
			if p.closing.Load() {
				return
			}
			p.apply(*p.fault.Load())
			if up := p.next.Load(); up != p.up {
				p.up = up
				for l := range p.links {
					p.closeLink(l)
				}
			}
			if p.reopen.Swap(false) {
				p.probing = false
				p.listenAgain()
			}
			select {
			case p.acks <- struct{}{}:
			default:
			}
		}
		for _, ev := range batch {
			switch id := uint32(ev.Fd); id {
			case idListener:
				p.accept()
			case idWake:
			default:
				if e := p.ends[id]; e != nil {
					p.ready(e, ev.Events)
				}
			}
		}
		p.due()
	}
}

// wait waits for events, for at most timeout (negative: no limit).
func (p *Proxy) wait(timeout time.Duration) (int, error) {
	ms := -1
	if timeout >= 0 {
		// Round up: a chunk must not leave early.
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	return unix.EpollWait(p.epfd, p.events, ms)
}

// timeout is how long the loop may wait before a timer is due: the first
// held-back chunk, a dial deadline or the end of an accept pause.
func (p *Proxy) timeout() time.Duration {
	if len(p.timed) == 0 && p.acceptAfter == 0 {
		return -1
	}
	now := p.now()
	next := time.Duration(-1)
	at := func(t time.Duration) {
		if next < 0 || t < next {
			next = t
		}
	}
	if p.acceptAfter > 0 {
		at(p.acceptAfter)
	}
	for l := range p.timed {
		if l.dialing {
			at(l.dialDeadline)
		}
		for _, h := range []*half{&l.up, &l.down} {
			if len(h.queue) > 0 && !h.blocked {
				at(h.queue[0].due)
			}
		}
	}
	if next < 0 {
		return -1
	}
	return max(next-now, 0)
}

// due runs the timers that are due.
func (p *Proxy) due() {
	if p.acceptAfter > 0 && p.now() >= p.acceptAfter {
		p.acceptAfter = 0
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(idListener)}
		_ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_MOD, p.lfd, &ev)
	}
	if len(p.timed) == 0 {
		return
	}
	now := p.now()
	for l := range p.timed {
		if l.dialing && now >= l.dialDeadline {
			p.closeLink(l)
			continue
		}
		if p.flush(l, &l.up) && p.flush(l, &l.down) {
			p.settle(l)
		}
	}
}

// accept takes every pending connection.
func (p *Proxy) accept() {
	for {
		fd, _, err := unix.Accept4(p.lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		switch {
		case err == nil:
		case errors.Is(err, unix.EAGAIN):
			return
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.ECONNABORTED):
			continue
		default:
			// Out of descriptors or memory: try again shortly, without
			// spinning on the listener meanwhile.
			_ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_MOD, p.lfd, &unix.EpollEvent{Fd: int32(idListener)})
			p.acceptAfter = p.now() + acceptPause
			return
		}
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		l := &link{up: half{dir: upstream}, down: half{dir: downstream}}
		l.client = p.register(fd, l)
		if l.client == nil {
			unix.Close(fd)
			continue
		}
		p.links[l] = struct{}{}
		if !p.applied.Partition {
			p.dial(l)
		}
		if _, ok := p.links[l]; ok {
			p.watch(l)
		}
		if p.refusing {
			return
		}
	}
}

// refuse passes an upstream's refusal on to the clients: the front stops
// listening, so that new clients are refused at once, as they would be by
// the upstream itself, until a probe finds the upstream answering again.
// Accepting and then closing every client instead would let each one in
// only to fail its first request, and a client library that backs off from
// a refused address (go-redis stops dialling after a pool's worth of
// refusals) would redial at every request. Connections already forwarded
// stay.
//
// The listener is closed and its port at once bound again by a socket that
// does not listen: the kernel refuses connections to it, and the port stays
// the front's.
func (p *Proxy) refuse() {
	if p.refusing || p.closing.Load() {
		return
	}
	_ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, p.lfd, nil)
	unix.Close(p.lfd)
	p.lfd = p.bound() // -1 if the port could not be held: listenAgain binds it
	p.refusing, p.acceptAfter = true, 0
	p.startProbe()
}

func (p *Proxy) startProbe() {
	if p.probing {
		return
	}
	p.probing = true
	p.probes.Add(1)
	go p.probe()
}

// bound returns a socket bound to the front's address that does not listen
// yet, or -1.
func (p *Proxy) bound() int {
	fd, err := bindSocket(p.family, p.listenSA)
	if err != nil {
		return -1
	}
	return fd
}

// bindSocket returns a non-blocking TCP socket bound to sa, not listening.
// SO_REUSEADDR as net.Listen sets it: a restarted front rebinds its port at
// once.
func bindSocket(family int, sa unix.Sockaddr) (int, error) {
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// probe dials the upstream every ProbeInterval until it answers, then has
// the loop listen again. It ends at the answer or at Close.
func (p *Proxy) probe() {
	defer p.probes.Done()
	d := net.Dialer{Timeout: DialTimeout}
	t := time.NewTicker(ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-p.probeCtx.Done():
			return
		case <-t.C:
		}
		c, err := d.DialContext(p.probeCtx, "tcp", p.next.Load().addr)
		if err != nil {
			continue
		}
		c.Close()
		p.reopen.Store(true)
		p.wake()
		return
	}
}

// listenAgain resumes listening after a refusal, once the probe found the
// upstream answering. Should that fail (the port was taken meanwhile), the
// front goes on refusing and probes again.
func (p *Proxy) listenAgain() {
	if !p.refusing {
		return
	}
	if p.lfd < 0 {
		p.lfd = p.bound()
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(idListener)}
	if p.lfd < 0 || unix.Listen(p.lfd, unix.SOMAXCONN) != nil || unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, p.lfd, &ev) != nil {
		p.startProbe()
		return
	}
	p.refusing = false
}

// register adds fd to the epoll set (with no events yet) as an end of l.
func (p *Proxy) register(fd int, l *link) *end {
	e := &end{id: p.nextID, fd: fd, link: l}
	p.nextID++
	if p.nextID < firstEndID {
		p.nextID = firstEndID
	}
	ev := unix.EpollEvent{Fd: int32(e.id)}
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return nil
	}
	p.ends[e.id] = e
	return e
}

// dial starts the non-blocking connect of l's upstream connection.
func (p *Proxy) dial(l *link) {
	fd, err := unix.Socket(p.up.family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		p.closeLink(l)
		return
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	err = unix.Connect(fd, p.up.sa)
	if err != nil && !errors.Is(err, unix.EINPROGRESS) {
		// Refused: the next clients are refused, and this one is closed.
		unix.Close(fd)
		if errors.Is(err, unix.ECONNREFUSED) {
			p.refuse()
		}
		p.closeLink(l)
		return
	}
	if l.server = p.register(fd, l); l.server == nil {
		unix.Close(fd)
		p.closeLink(l)
		return
	}
	if err != nil {
		l.dialing, l.dialDeadline = true, p.now()+DialTimeout
		p.timed[l] = struct{}{}
	}
}

// mode is what the fault in force does to a direction.
type mode uint8

const (
	plain   mode = iota
	drop         // partition
	delay        // latency, downstream
	service      // service time, upstream
)

func (p *Proxy) mode(d direction) mode {
	f := &p.applied
	switch {
	case f.Partition:
		return drop
	case d == upstream && f.ServiceTime > 0:
		return service
	case d == downstream && f.Latency > 0:
		return delay
	}
	return plain
}

// halves returns the half that end e reads from and the half it writes to.
func (l *link) halves(e *end) (reads, writes *half) {
	if e == l.client {
		return &l.up, &l.down
	}
	return &l.down, &l.up
}

// src and dst are the ends a half reads from and writes to.
func (l *link) src(h *half) *end {
	if h.dir == upstream {
		return l.client
	}
	return l.server
}

func (l *link) dst(h *half) *end {
	if h.dir == upstream {
		return l.server
	}
	return l.client
}

// watch brings l's epoll registrations up to date: read a source while its
// half may take more, watch a destination while a write is blocked (or the
// dial is under way).
func (p *Proxy) watch(l *link) {
	p.interest(l.client, l)
	if l.server != nil {
		p.interest(l.server, l)
	}
}

func (p *Proxy) interest(e *end, l *link) {
	reads, writes := l.halves(e)
	var want uint32
	connected := l.server != nil && !l.dialing
	dropping := p.mode(reads.dir) == drop
	if !reads.eof && reads.queued < maxQueued && !reads.blocked && (connected || dropping) {
		want |= unix.EPOLLIN | unix.EPOLLRDHUP
	}
	if (e == l.server && l.dialing) || (writes.blocked && !dropping) {
		want |= unix.EPOLLOUT
	}
	if want == e.interest {
		return
	}
	ev := unix.EpollEvent{Events: want, Fd: int32(e.id)}
	if unix.EpollCtl(p.epfd, unix.EPOLL_CTL_MOD, e.fd, &ev) == nil {
		e.interest = want
	}
}

// ready handles what epoll reported for end e.
func (p *Proxy) ready(e *end, events uint32) {
	l := e.link
	if events&unix.EPOLLOUT != 0 {
		if e == l.server && l.dialing {
			if soErr, err := unix.GetsockoptInt(e.fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || soErr != 0 {
				if err == nil && unix.Errno(soErr) == unix.ECONNREFUSED {
					p.refuse()
				}
				p.closeLink(l)
				return
			}
			l.dialing = false
			p.watch(l)
			p.settle(l)
		} else {
			_, writes := l.halves(e)
			writes.blocked = false
			if !p.flush(l, writes) {
				return
			}
			p.settle(l)
		}
	}
	if p.ends[e.id] != e {
		return // closed above
	}
	switch {
	case events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 && e.interest&unix.EPOLLIN != 0:
		reads, _ := l.halves(e)
		p.read(l, e, reads)
	case events&(unix.EPOLLHUP|unix.EPOLLERR) != 0:
		// Hung up both ways (or reset) while we were not reading from
		// it: nothing more can go either way. Level-triggered epoll
		// would report it on every wait.
		if p.applied.Partition && e == l.server {
			p.loseServer(l)
			return
		}
		p.closeLink(l)
	}
}

// read takes one chunk from e, the source of h, and forwards, holds back or
// drops it as the mode asks. One read per event: level-triggered epoll
// reports the socket again if more is waiting, and the read that would find
// nothing is a system call saved.
func (p *Proxy) read(l *link, e *end, h *half) {
	var n int
	var err error
	for {
		n, err = unix.Read(e.fd, p.buf)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	switch {
	case errors.Is(err, unix.EAGAIN):
		return
	case err != nil:
		if p.mode(h.dir) == drop && e == l.server {
			p.loseServer(l)
			return
		}
		p.closeLink(l)
		return
	case n == 0:
		p.ended(l, e, h)
		return
	}
	data := p.buf[:n]
	now := p.now()
	switch p.mode(h.dir) {
	case drop:
		l.lost = true
		return
	case plain:
		if len(h.queue) > 0 {
			p.hold(l, h, data, 0)
			return
		}
		w, err := p.write(l.dst(h), data)
		if err != nil {
			p.closeLink(l)
			return
		}
		if w < n {
			// The destination is full: keep the rest, stop reading
			// until it drains.
			p.hold(l, h, data[w:], 0)
			h.blocked = true
			p.watch(l)
		}
	case delay:
		p.hold(l, h, data, now+p.applied.delay())
	case service:
		p.busyUntil = max(p.busyUntil, now) + p.applied.ServiceTime
		p.hold(l, h, data, p.busyUntil)
	}
}

// hold queues a copy of b on h, due at due.
func (p *Proxy) hold(l *link, h *half, b []byte, due time.Duration) {
	h.queue = append(h.queue, chunk{b: append([]byte(nil), b...), due: due})
	h.queued += len(b)
	p.timed[l] = struct{}{}
	if h.queued >= maxQueued {
		p.watch(l)
	}
}

// write writes b to e, as much as it takes now.
func (p *Proxy) write(e *end, b []byte) (int, error) {
	for {
		n, err := unix.Write(e.fd, b)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			return 0, nil
		case err != nil:
			return 0, err
		}
		return n, nil
	}
}

// flush writes h's due chunks. It returns false when it closed the link.
func (p *Proxy) flush(l *link, h *half) bool {
	if h.blocked || len(h.queue) == 0 {
		return true
	}
	if p.mode(h.dir) == drop {
		h.queue, h.queued = nil, 0
		l.lost = true
		return true
	}
	dst := l.dst(h)
	if dst == nil || l.dialing {
		return true
	}
	now := p.now()
	for len(h.queue) > 0 && h.queue[0].due <= now {
		c := &h.queue[0]
		w, err := p.write(dst, c.b)
		if err != nil {
			p.closeLink(l)
			return false
		}
		h.queued -= w
		if w < len(c.b) {
			c.b = c.b[w:]
			h.blocked = true
			break
		}
		h.queue[0] = chunk{}
		h.queue = h.queue[1:]
	}
	if len(h.queue) == 0 {
		h.queue = nil
	}
	p.watch(l)
	return true
}

// settle finishes what a drained half owes (the shutdown of a source that
// ended) and takes l off the timer set once nothing is held or dialled.
func (p *Proxy) settle(l *link) {
	for _, h := range []*half{&l.up, &l.down} {
		if h.eof && !h.shut && len(h.queue) == 0 {
			h.shut = true
			if dst := l.dst(h); dst != nil {
				_ = unix.Shutdown(dst.fd, unix.SHUT_WR)
			}
		}
	}
	if l.up.shut && l.down.shut {
		p.closeLink(l)
		return
	}
	if !l.dialing && len(l.up.queue) == 0 && len(l.down.queue) == 0 {
		delete(p.timed, l)
	}
}

// ended handles the end of e's stream (EOF).
func (p *Proxy) ended(l *link, e *end, h *half) {
	switch {
	case p.mode(h.dir) == drop && e == l.server:
		p.loseServer(l)
		return
	case e == l.client && (p.mode(h.dir) == drop || l.server == nil || l.dialing):
		// The client left: nothing to forward, nothing to hide.
		p.closeLink(l)
		return
	}
	h.eof = true
	p.watch(l)
	p.settle(l)
}

// loseServer drops l's upstream connection, which went away during a
// partition, without telling the client: the partition keeps it silent.
// The link is closed when the partition ends.
func (p *Proxy) loseServer(l *link) {
	p.closeEnd(l.server)
	l.server, l.serverGone = nil, true
	l.down = half{dir: downstream}
}

func (p *Proxy) closeEnd(e *end) {
	if e == nil {
		return
	}
	_ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, e.fd, nil)
	unix.Close(e.fd)
	delete(p.ends, e.id)
}

func (p *Proxy) closeLink(l *link) {
	if _, ok := p.links[l]; !ok {
		return
	}
	p.closeEnd(l.client)
	p.closeEnd(l.server)
	delete(p.links, l)
	delete(p.timed, l)
}

// apply sets every link up for fault f.
func (p *Proxy) apply(f Fault) {
	if f == p.applied {
		return
	}
	p.applied = f
	if f.Partition && p.refusing {
		// A partition is silence, even in front of an upstream that is
		// down: clients are accepted again, and wait.
		p.listenAgain()
	}
	for l := range p.links {
		if !f.Partition {
			if l.serverGone || l.lost {
				p.closeLink(l)
				continue
			}
			if l.server == nil {
				p.dial(l)
				if _, ok := p.links[l]; !ok {
					continue
				}
			}
		}
		for _, h := range []*half{&l.up, &l.down} {
			if f.Partition {
				if len(h.queue) > 0 {
					l.lost = true
				}
				h.queue, h.queued, h.blocked = nil, 0, false
				continue
			}
			// What the old fault held back goes out now.
			for i := range h.queue {
				h.queue[i].due = 0
			}
		}
		p.watch(l)
		if p.flush(l, &l.up) && p.flush(l, &l.down) {
			p.settle(l)
		}
	}
}

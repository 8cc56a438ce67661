// Package faultproxy is a TCP front for one upstream server that can fault
// the network between its clients and the server: silence (a partition),
// added latency with jitter, and a capacity limit.
//
// A front is meant to cost close to nothing while no fault is on, because
// the lab measures Redis and the lock, not its own plumbing. So a Proxy is
// one event loop over non-blocking sockets (epoll): a chunk a client sends is
// one read and one write, with no goroutine handing it to another. A chunk
// meets the fault machinery only while a fault needs it, and a fault switched
// on while connections are open applies to them at once: the loop owns every
// connection and re-reads the fault on every change.
//
// Measured on a 2-core VM, one forwarded PING round trip cost the front
// about 55 µs of CPU, against 70–95 µs for a goroutine-per-direction front
// (io.Copy, even spliced) and about 120 µs for Toxiproxy. Most of what is
// left is the kernel's and the scheduler's: every front doubles the loopback
// TCP hops of a request. (A loop that kept its scheduler slot while waiting,
// with a raw epoll_wait, saved about 15 µs more per round trip but cost an
// idle front about 1% of a core; it was not worth it at the lab's rates.)
//
// An upstream that refuses connections (a server that is down) makes the
// front refuse them too, until a probe finds the upstream answering again:
// clients see what they would see without the front, a refused connection,
// and not a connection accepted only to be closed.
//
// The lab's node supervisors put one in front of every redis-server and
// internal/redistest gives tests one, so the faults a test exercises are the
// faults the lab injects. It needs Linux.
package faultproxy

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Fault is what a Proxy does to the bytes it forwards. The zero Fault
// forwards them untouched.
type Fault struct {
	// Partition drops every byte both ways. New connections are accepted
	// but not forwarded, so clients time out, as behind a real partition,
	// instead of being refused; they reach the upstream once the partition
	// ends. What was dropped stays dropped, and a connection that lost
	// bytes either way is closed when the partition ends: TCP never
	// delivers a stream with a hole in it, so carrying on would hand the
	// two ends a stream no network produces (an HTTP/2 connection, etcd's
	// gRPC, that lost frames kept answering pings while the requests on it
	// never completed). Connections that sent nothing during the partition
	// carry on. An upstream that closes during a partition is not
	// announced to the client until it ends.
	Partition bool
	// Latency delays every chunk the upstream sends by Latency ± Jitter,
	// counted from when the chunk arrived, in whole milliseconds (the
	// semantics of Toxiproxy's latency toxic, which the lab used before).
	// Chunks keep their order. Jitter without Latency does nothing. When
	// the latency is removed, the chunks it still holds go out at once.
	Latency, Jitter time.Duration
	// ServiceTime turns the upstream into a single queue shared by every
	// connection: a chunk a client sends waits for the chunks before it,
	// then ServiceTime more, before it is forwarded. The front passes at
	// most one chunk per ServiceTime, and load past that queues up as it
	// does on a saturated CPU: a test's model of a node pushed past what it
	// can take. Resolution: about a millisecond.
	ServiceTime time.Duration
}

// String describes the fault for logs.
func (f Fault) String() string {
	switch {
	case f == Fault{}:
		return "none"
	case f.Partition:
		return "partition"
	}
	s := ""
	if f.Latency > 0 {
		s = fmt.Sprintf("latency %v±%v", f.Latency, f.Jitter)
	}
	if f.ServiceTime > 0 {
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("service time %v", f.ServiceTime)
	}
	return s
}

// delay draws one chunk's added latency: Latency ± Jitter in whole
// milliseconds, never negative.
func (f *Fault) delay() time.Duration {
	ms := f.Latency.Milliseconds()
	if j := f.Jitter.Milliseconds(); j > 0 {
		ms += rand.Int64N(2*j) - j
	}
	return time.Duration(max(ms, 0)) * time.Millisecond
}

// normal returns f with negative durations as zero.
func (f Fault) normal() Fault {
	f.Latency, f.Jitter, f.ServiceTime = max(f.Latency, 0), max(f.Jitter, 0), max(f.ServiceTime, 0)
	return f
}

// DialTimeout bounds the dial of the upstream for a new connection; a
// client whose upstream cannot be reached is closed, as a refused upstream
// would close it.
const DialTimeout = 2 * time.Second

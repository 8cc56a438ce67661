//go:build !linux

package faultproxy

import (
	"errors"
)

// Proxy forwards the connections it accepts to one upstream address. It
// exists only on Linux.
type Proxy struct{}

// Listen fails: the proxy's event loop is built on epoll.
func Listen(addr, upstream string) (*Proxy, error) {
	return nil, errors.New("faultproxy: needs Linux (epoll)")
}

// Addr is the address clients connect to.
func (p *Proxy) Addr() string { return "" }

// Fault returns the fault in force.
func (p *Proxy) Fault() Fault { return Fault{} }

// Set puts f in force.
func (p *Proxy) Set(f Fault) {}

// SetUpstream changes the upstream.
func (p *Proxy) SetUpstream(upstream string) error {
	return errors.New("faultproxy: needs Linux (epoll)")
}

// Close stops the proxy.
func (p *Proxy) Close() error { return nil }

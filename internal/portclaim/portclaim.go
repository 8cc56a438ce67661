// Package portclaim claims loopback ports for a lab across processes.
//
// A lab chooses its ports by finding them free, then binds them seconds
// later from processes of its own (supervisors, redis-server, etcd), and
// leaves some unbound for a while during its life (a crashed node's
// redis-server). Another lab chosen meanwhile, by another process, would
// find the same ports free. A claim closes that window: one file per port
// in a directory every process on the machine shares, locked with flock(2)
// by the process that chose the port, for as long as it holds the claim.
// The kernel drops the lock with the process, so a killed owner leaves no
// claim behind.
package portclaim

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
)

// Dir is the directory of the claims.
var Dir = filepath.Join(os.TempDir(), "redlab-ports")

// Claim claims every port of ports, if each is unclaimed and free to bind
// on 127.0.0.1 right now. It returns ok false, and holds nothing, when one
// is not; an error only when the claims themselves cannot be made. release
// drops every claim; it may be called more than once. A port listed twice
// (layouts whose ranges overlap) is claimed once.
func Claim(ports []int) (release func(), ok bool, err error) {
	ports = slices.Compact(slices.Sorted(slices.Values(ports)))
	if err := os.MkdirAll(Dir, 0o777); err != nil {
		return nil, false, fmt.Errorf("portclaim: %w", err)
	}
	var held []*os.File
	release = func() {
		for _, f := range held {
			f.Close() // closing the descriptor releases the lock
		}
		held = nil
	}
	for _, p := range ports {
		f, err := os.OpenFile(filepath.Join(Dir, strconv.Itoa(p)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			release()
			return nil, false, fmt.Errorf("portclaim: %w", err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			release()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, false, nil
			}
			return nil, false, fmt.Errorf("portclaim: port %d: %w", p, err)
		}
		held = append(held, f)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			release()
			return nil, false, nil
		}
		l.Close()
	}
	return release, true, nil
}

// Layout is the ports base+offset+i for every offset and every i in 1..n:
// n nodes laid out like a lab's.
func Layout(base, n int, offsets ...int) []int {
	var ports []int
	for _, off := range offsets {
		for i := 1; i <= n; i++ {
			ports = append(ports, base+off+i)
		}
	}
	return ports
}

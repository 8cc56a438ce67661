// Package redirect sends the connections a lab's front would proxy straight
// to the redis-server behind it, in the kernel, while no fault is in force
// on the front.
//
// A front (internal/faultproxy) costs every request two loopback hops and
// a wake-up of its process: a healthy lab spent about 1.4 times the CPU per
// reservation of the same nodes addressed directly. Faults need the front,
// health does not: with no fault in force, an nftables DNAT maps the
// front's port on 127.0.0.1 to the redis-server's, and the front sees no
// traffic. When a fault starts, the mapping goes first, then the kernel's
// connection-tracking entries of the connections it redirected, so the
// next packet of each meets no socket and is reset; the client reconnects,
// through the front, which then applies the fault to every connection.
// (Each redirected connection in a client's pool fails one request that
// way when a fault starts, as a connection does that a network fault
// breaks.) When the fault ends the mapping comes back for new connections;
// connections made through the front stay on it.
//
// The mapping lives in one nftables table, "redlab", shared by every lab on
// the machine: a map from a front's port to its upstream's port, and one
// rule in a nat output chain. Each element belongs to the process that
// listens on the front's port (the node's supervisor): it sets and removes
// its own, and removes it when it stops. It needs root (CAP_NET_ADMIN) and
// the nft and conntrack commands (Debian packages nftables and conntrack).
package redirect

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Table and Map name the nftables objects this package owns.
const (
	Table = "redlab"
	Map   = "fronts"
	chain = "fronts_out"
)

// host is the address fronts and their upstreams listen on.
const host = "127.0.0.1"

// commandTimeout bounds one nft or conntrack run.
const commandTimeout = 10 * time.Second

// Available reports why the kernel redirect cannot run here, or nil: it
// needs root and the nft and conntrack commands.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("redirect: needs root (nftables and conntrack)")
	}
	for _, c := range []string{"nft", "conntrack"} {
		if _, err := exec.LookPath(c); err != nil {
			return fmt.Errorf("redirect: %s not found (Debian packages nftables and conntrack): %w", c, err)
		}
	}
	return nil
}

// setupMu makes one process's set-ups of the table take turns (the kernel
// orders those of several processes: each is one nft transaction).
var setupMu sync.Mutex

// ensure creates the table, the map and the rule, keeping the elements of
// the map: the rule is replaced in the same transaction, so there is one
// rule whoever ran it last.
func ensure(ctx context.Context) error {
	setupMu.Lock()
	defer setupMu.Unlock()
	script := fmt.Sprintf(`table ip %[1]s {
	map %[2]s {
		type inet_service : inet_service
	}
	chain %[3]s {
		type nat hook output priority -100; policy accept;
	}
}
flush chain ip %[1]s %[3]s
add rule ip %[1]s %[3]s ip daddr %[4]s meta l4proto tcp dnat ip to %[4]s : tcp dport map @%[2]s
`, Table, Map, chain, host)
	return nft(ctx, script)
}

// Front is the redirect of one front's port. Its methods are safe for
// concurrent use.
type Front struct {
	port int

	mu sync.Mutex
	to int // the upstream port it redirects to; 0: off
}

// New sets up the table and returns the redirect of the front on port,
// off: whatever a previous owner of the port left is removed, and so are
// the elements of fronts nobody listens on any more (see prune).
func New(ctx context.Context, port int) (*Front, error) {
	if err := ensure(ctx); err != nil {
		return nil, err
	}
	f := &Front{port: port}
	if err := f.remove(ctx); err != nil {
		return nil, err
	}
	if err := prune(ctx); err != nil {
		return nil, err
	}
	return f, nil
}

// Release removes the element of the front on port, if any and if nobody
// listens on the port, and resets what it redirected: for the sweep after
// an owner that could not (killed by SIGKILL). A port someone listens on
// may be a live owner's again. A no-op where the redirect cannot run, since
// nothing there set one.
func Release(ctx context.Context, port int) error {
	if Available() != nil {
		return nil
	}
	return removeUnheard(ctx, func(p int) bool { return p == port })
}

// prune removes the elements of fronts nobody listens on: their owner
// died without closing (SIGKILL), and the element would send a later
// listener's connections on that port elsewhere. An owner listens on its
// front's port before it sets the element and removes the element before
// it closes the port, so a live owner's element is never pruned.
func prune(ctx context.Context) error {
	return removeUnheard(ctx, func(int) bool { return true })
}

// removeUnheard removes the elements of the ports which nobody listens on.
func removeUnheard(ctx context.Context, which func(port int) bool) error {
	els, err := Elements(ctx)
	if err != nil {
		return err
	}
	listening, err := listeningPorts()
	if err != nil {
		return err
	}
	for port := range els {
		if !which(port) || listening[port] {
			continue
		}
		if err := (&Front{port: port}).remove(ctx); err != nil {
			return err
		}
	}
	return nil
}

// listeningPorts returns the local ports of this network namespace's TCP
// sockets in the LISTEN state, on any address (/proc/net/tcp and tcp6).
func listeningPorts() (map[int]bool, error) {
	ports := map[int]bool{}
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(name)
		if errors.Is(err, os.ErrNotExist) && name == "/proc/net/tcp6" {
			continue // no IPv6 in this kernel
		}
		if err != nil {
			return nil, fmt.Errorf("redirect: %w", err)
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			// sl local_address rem_address st ...: the address is
			// hex ADDR:PORT, st 0A is LISTEN.
			f := strings.Fields(line)
			if len(f) < 4 || f[3] != "0A" {
				continue
			}
			_, hexPort, ok := strings.Cut(f[1], ":")
			if !ok {
				continue
			}
			if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil {
				ports[int(p)] = true
			}
		}
	}
	return ports, nil
}

// On sends new connections to the front's port to upstream port to,
// which listens on 127.0.0.1.
func (f *Front) On(ctx context.Context, to int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.to == to {
		return nil
	}
	if f.to != 0 {
		if err := f.offLocked(ctx); err != nil {
			return err
		}
	}
	elem := fmt.Sprintf("add element ip %s %s { %d : %d }\n", Table, Map, f.port, to)
	if err := nft(ctx, elem); err != nil {
		// An element left with another upstream (a dead owner's):
		// replace it in one transaction.
		del := fmt.Sprintf("delete element ip %s %s { %d }\n", Table, Map, f.port)
		if err2 := nft(ctx, del+elem); err2 != nil {
			return err
		}
	}
	f.to = to
	return nil
}

// Off removes the mapping and resets the connections it redirected, so
// that every connection to the front's port from now on goes through the
// front. A no-op while off.
func (f *Front) Off(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.to == 0 {
		return nil
	}
	return f.offLocked(ctx)
}

func (f *Front) offLocked(ctx context.Context) error {
	if err := f.remove(ctx); err != nil {
		return err
	}
	f.to = 0
	return nil
}

// remove deletes the element, if any, then the tracking entries of the
// connections to the front's port.
func (f *Front) remove(ctx context.Context) error {
	del := fmt.Sprintf("delete element ip %s %s { %d }\n", Table, Map, f.port)
	if err := nft(ctx, del); err != nil && !strings.Contains(err.Error(), "No such file or directory") {
		return err
	}
	return flush(ctx, f.port)
}

// Close removes the front's mapping and resets what it redirected.
func (f *Front) Close(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.offLocked(ctx)
}

// flush deletes the connection-tracking entries of TCP connections made to
// 127.0.0.1:port. Entries of connections the rule did not redirect
// (through the front) are made again by their next packet, unchanged: no
// element maps the port by then.
func flush(ctx context.Context, port int) error {
	out, err := run(ctx, nil, "conntrack", "-D", "-p", "tcp", "--orig-dst", host, "--orig-port-dst", strconv.Itoa(port))
	// conntrack exits 1 when no entry matched.
	if err != nil && !strings.Contains(out, "0 flow entries have been deleted") {
		return fmt.Errorf("redirect: reset the connections to port %d: %w: %s", port, err, strings.TrimSpace(out))
	}
	return nil
}

// Elements returns the map's elements (front port to upstream port), for
// checks and lab status; an empty map when the table does not exist.
func Elements(ctx context.Context) (map[int]int, error) {
	out, err := run(ctx, nil, "nft", "list", "map", "ip", Table, Map)
	if err != nil {
		if strings.Contains(out, "No such file or directory") {
			return map[int]int{}, nil
		}
		return nil, fmt.Errorf("redirect: list: %w: %s", err, strings.TrimSpace(out))
	}
	els := map[int]int{}
	_, list, ok := strings.Cut(out, "elements = {")
	if !ok {
		return els, nil
	}
	list, _, _ = strings.Cut(list, "}")
	for _, e := range strings.Split(list, ",") {
		k, v, ok := strings.Cut(e, ":")
		if !ok {
			continue
		}
		kp, err1 := strconv.Atoi(strings.TrimSpace(k))
		vp, err2 := strconv.Atoi(strings.TrimSpace(v))
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("redirect: unexpected element %q in %q", e, out)
		}
		els[kp] = vp
	}
	return els, nil
}

// nft runs script as one nftables transaction.
func nft(ctx context.Context, script string) error {
	out, err := run(ctx, strings.NewReader(script), "nft", "-f", "-")
	if err != nil {
		return fmt.Errorf("redirect: nft: %w: %s", err, strings.TrimSpace(out))
	}
	return nil
}

func run(ctx context.Context, stdin *strings.Reader, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

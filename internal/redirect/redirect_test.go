package redirect

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"syscall"
	"testing"

	"github.com/redlocklab/redlocklab/internal/testenv"
)

// server accepts connections and answers each line with its name.
func server(t *testing.T, name string) (port int) {
	t.Helper()
	ln, err := net.Listen("tcp", host+":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					if _, err := r.ReadString('\n'); err != nil {
						return
					}
					if _, err := io.WriteString(c, name+"\n"); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// conn is a client connection to a port.
type conn struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, port int) *conn {
	t.Helper()
	c, err := net.Dial("tcp", host+":"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &conn{Conn: c, r: bufio.NewReader(c)}
}

// ask sends a line and returns who answered.
func (c *conn) ask() (string, error) {
	if _, err := io.WriteString(c, "who\n"); err != nil {
		return "", err
	}
	s, err := c.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return s[:len(s)-1], nil
}

func mustAsk(t *testing.T, c *conn, want, when string) {
	t.Helper()
	got, err := c.ask()
	if err != nil || got != want {
		t.Fatalf("%s: answered by %q (%v), want %q", when, got, err, want)
	}
}

// TestRedirect: with the mapping on, connections to the front's port reach
// the upstream and the front sees none; Off resets them and sends new ones
// through the front; On again leaves the front's connections on it; Close
// leaves no element behind.
func TestRedirect(t *testing.T) {
	if err := Available(); err != nil {
		testenv.Missing(t, err.Error())
	}
	ctx := context.Background()
	front, upstream := server(t, "front"), server(t, "upstream")
	f, err := New(ctx, front)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(ctx) })

	mustAsk(t, dial(t, front), "front", "off (new)")
	if err := f.On(ctx, upstream); err != nil {
		t.Fatal(err)
	}
	if els, err := Elements(ctx); err != nil || els[front] != upstream {
		t.Fatalf("elements %v (%v), want %d : %d", els, err, front, upstream)
	}
	direct := dial(t, front)
	mustAsk(t, direct, "upstream", "on")

	if err := f.Off(ctx); err != nil {
		t.Fatal(err)
	}
	// The redirected connection is reset by its next packet.
	if got, err := direct.ask(); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("a redirected connection after Off: answered %q, %v; want a reset", got, err)
	}
	through := dial(t, front)
	mustAsk(t, through, "front", "off again")

	if err := f.On(ctx, upstream); err != nil {
		t.Fatal(err)
	}
	mustAsk(t, through, "front", "a connection made through the front, after On")
	mustAsk(t, dial(t, front), "upstream", "on again (new)")

	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if els, err := Elements(ctx); err != nil {
		t.Fatal(err)
	} else if _, ok := els[front]; ok {
		t.Fatalf("after Close: elements %v still map port %d", els, front)
	}
}

// TestNewReplacesAStaleElement: a port left mapped elsewhere by a dead owner
// is unmapped by the next owner, and On replaces the element.
func TestNewReplacesAStaleElement(t *testing.T) {
	if err := Available(); err != nil {
		testenv.Missing(t, err.Error())
	}
	ctx := context.Background()
	front, upstream, other := server(t, "front"), server(t, "upstream"), server(t, "other")
	dead, err := New(ctx, front)
	if err != nil {
		t.Fatal(err)
	}
	if err := dead.On(ctx, other); err != nil {
		t.Fatal(err)
	}
	f, err := New(ctx, front) // the dead owner never closed
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(ctx) })
	mustAsk(t, dial(t, front), "front", "a new owner, off")
	stale := &Front{port: front} // another dead owner, after the new one started
	if err := stale.On(ctx, other); err != nil {
		t.Fatal(err)
	}
	mustAsk(t, dial(t, front), "other", "the stale element")
	if err := f.On(ctx, upstream); err != nil {
		t.Fatalf("On over another upstream's element: %v", err)
	}
	mustAsk(t, dial(t, front), "upstream", "replaced")
}

// TestStaleElementsGo: an element whose front nobody listens on (its owner
// killed before it could remove it) goes when any front sets up, and
// Release removes one but leaves a port someone listens on mapped.
func TestStaleElementsGo(t *testing.T) {
	if err := Available(); err != nil {
		testenv.Missing(t, err.Error())
	}
	ctx := context.Background()
	upstream := server(t, "upstream")
	closedPort := func() int {
		ln, err := net.Listen("tcp", host+":0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().(*net.TCPAddr).Port
	}
	mapped := func(port int) bool {
		t.Helper()
		els, err := Elements(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, ok := els[port]
		return ok
	}

	// A dead owner's element, then a new front on another port.
	dead := closedPort()
	if err := (&Front{port: dead}).On(ctx, upstream); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { (&Front{port: dead}).remove(ctx) })
	live := server(t, "live")
	lf, err := New(ctx, live)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lf.Close(ctx) })
	if err := lf.On(ctx, upstream); err != nil {
		t.Fatal(err)
	}
	if mapped(dead) {
		t.Errorf("port %d, which nobody listens on, still mapped after a new front set up", dead)
	}

	// Release: a listened port stays mapped, a dead one goes.
	if err := Release(ctx, live); err != nil {
		t.Fatal(err)
	}
	if !mapped(live) {
		t.Errorf("Release unmapped port %d, which a live front listens on", live)
	}
	dead2 := closedPort()
	if err := (&Front{port: dead2}).On(ctx, upstream); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { (&Front{port: dead2}).remove(ctx) })
	if err := Release(ctx, dead2); err != nil {
		t.Fatal(err)
	}
	if mapped(dead2) {
		t.Errorf("port %d still mapped after Release", dead2)
	}
}

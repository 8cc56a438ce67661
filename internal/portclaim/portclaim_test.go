package portclaim

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// TestClaim: a bound port cannot be claimed; a port claimed here cannot be
// claimed by a second process until the claim is released.
func TestClaim(t *testing.T) {
	if p := os.Getenv("PORTCLAIM_CHILD"); p != "" {
		port, _ := strconv.Atoi(p)
		release, ok, err := Claim([]int{port})
		switch {
		case err != nil:
			os.Exit(2)
		case !ok:
			os.Exit(1)
		}
		release()
		os.Exit(0)
	}
	tmp := t.TempDir()
	Dir = filepath.Join(tmp, "redlab-ports") // where the child's TMPDIR puts it
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if _, ok, err := Claim([]int{port}); ok || err != nil {
		t.Errorf("claim of a bound port: ok %v, err %v; want refused", ok, err)
	}
	l.Close()

	child := func() int {
		cmd := exec.Command(os.Args[0], "-test.run=^TestClaim$")
		cmd.Env = append(os.Environ(), "PORTCLAIM_CHILD="+strconv.Itoa(port), "TMPDIR="+tmp)
		var ee *exec.ExitError
		if err := cmd.Run(); errors.As(err, &ee) {
			return ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0
	}
	release, ok, err := Claim([]int{port})
	if !ok || err != nil {
		t.Fatalf("claim of a free port: ok %v, err %v", ok, err)
	}
	if code := child(); code != 1 {
		t.Errorf("a second process claiming a claimed port: exit %d, want 1 (refused)", code)
	}
	release()
	if code := child(); code != 0 {
		t.Errorf("a second process claiming a released port: exit %d, want 0", code)
	}
}

func TestLayout(t *testing.T) {
	if got, want := Layout(7000, 2, 100, 200), []int{7101, 7102, 7201, 7202}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestClaimOverlap: a layout whose ranges overlap lists a port twice; the
// claim holds it once instead of refusing itself.
func TestClaimOverlap(t *testing.T) {
	Dir = filepath.Join(t.TempDir(), "redlab-ports")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	release, ok, err := Claim([]int{port, port})
	if !ok || err != nil {
		t.Fatalf("claim of a free port listed twice: ok %v, err %v", ok, err)
	}
	release()
}

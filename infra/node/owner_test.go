package node_test

import (
	"os"
	"os/exec"
	"testing"

	"github.com/redlocklab/redlocklab/infra/node"
)

// TestOwnerAlive: an owner is its pid and its start time: a process that
// ended is gone, and so is a live pid with another start time (the pid
// reused by a later process).
func TestOwnerAlive(t *testing.T) {
	self, err := node.OwnerOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !self.Alive() {
		t.Errorf("owner %+v (this process): Alive false, want true", self)
	}
	reused := node.Owner{PID: self.PID, Start: self.Start + 1}
	if reused.Alive() {
		t.Errorf("owner %+v (our pid, another start time): Alive true, want false", reused)
	}

	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	o, err := node.OwnerOf(sleep.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if !o.Alive() {
		t.Errorf("owner %+v (a running sleep): Alive false, want true", o)
	}
	_ = sleep.Process.Kill()
	_ = sleep.Wait()
	if o.Alive() {
		t.Errorf("owner %+v (a killed sleep): Alive true, want false", o)
	}
	if _, err := node.OwnerOf(sleep.Process.Pid); err == nil {
		t.Errorf("OwnerOf(a reaped pid): no error")
	}

	// The owner file: written, read back, removed.
	dir := t.TempDir()
	if got, err := node.ReadOwner(dir); got != nil || err != nil {
		t.Errorf("ReadOwner without a file: %+v, %v; want none", got, err)
	}
	if err := node.WriteOwner(dir, &o); err != nil {
		t.Fatal(err)
	}
	if got, err := node.ReadOwner(dir); err != nil || got == nil || *got != o {
		t.Errorf("ReadOwner: %+v, %v; want %+v", got, err, o)
	}
	if err := node.WriteOwner(dir, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := node.ReadOwner(dir); got != nil || err != nil {
		t.Errorf("ReadOwner after WriteOwner(nil): %+v, %v; want none", got, err)
	}
}

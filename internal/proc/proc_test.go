package proc

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestAlive(t *testing.T) {
	if !Alive(os.Getpid()) {
		t.Fatalf("Alive(self): got false, want true")
	}
	if Alive(0) || Alive(-1) {
		t.Errorf("Alive of a non-positive pid: got true, want false")
	}

	// A child that exited and was not reaped yet is a zombie: not alive.
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := State(pid)
		if err != nil {
			t.Fatalf("State of the unreaped child: %v", err)
		}
		if s == 'Z' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("child %d: state %c after 10 s, want Z", pid, s)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if Alive(pid) {
		t.Errorf("Alive(zombie %d): got true, want false", pid)
	}
	_ = cmd.Wait()
	if Alive(pid) {
		t.Errorf("Alive(reaped %d): got true, want false", pid)
	}
}

func TestStateStopped(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := State(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if s == 'T' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stopped child: state %c after 10 s, want T", s)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !Alive(cmd.Process.Pid) {
		t.Errorf("Alive(stopped child): got false, want true")
	}
}

// TestStartTime: a process's start time is stable, and a process started
// later has a later one (what keeps a reused pid from passing for another
// process).
func TestStartTime(t *testing.T) {
	self1, err := StartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	self2, err := StartTime(os.Getpid())
	if err != nil || self2 != self1 {
		t.Fatalf("StartTime(self) twice: %d then %d (%v), want the same", self1, self2, err)
	}
	time.Sleep(20 * time.Millisecond) // at least one clock tick (10 ms at USER_HZ 100)
	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	child, err := StartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if child <= self1 {
		t.Errorf("start time of a child started after us: %d, want after ours %d", child, self1)
	}
	if _, err := StartTime(0); err == nil {
		t.Error("StartTime(0): got no error")
	}
}

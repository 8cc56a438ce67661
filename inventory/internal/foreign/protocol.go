package foreign

import (
	"errors"
	"fmt"
	"strings"
)

// The operations of a request.
const (
	opAcquire = "acquire"
	opRelease = "release"
	opExtend  = "extend"
)

// request is one line to the adapter.
type request struct {
	ID    uint64 `json:"id"`
	Op    string `json:"op"`
	Key   string `json:"key"`
	Token string `json:"token,omitempty"`
	TTLMs int64  `json:"ttl_ms,omitempty"`
}

// hello is the adapter's first line: it is ready for requests.
type hello struct {
	Protocol int    `json:"protocol"`
	Client   string `json:"client"`
}

// answer is one line from the adapter after the hello.
type answer struct {
	ID         *uint64  `json:"id"`
	OK         bool     `json:"ok"`
	Token      string   `json:"token"`
	ValidityMs *float64 `json:"validity_ms"`
	Error      Class    `json:"error"`
	Message    string   `json:"message"`
	Attempts   int      `json:"attempts"`
}

// check says what is wrong with an answer to an op, or nil: a grant needs
// a token and a positive validity, a failure one of the classes.
func (a answer) check(op string) error {
	switch {
	case !a.OK && !a.Error.known():
		return fmt.Errorf("a failed %s with error %q (want one of %s)", op, a.Error, strings.Join(classNames(), ", "))
	case !a.OK || op == opRelease:
		return nil
	case a.Token == "":
		return fmt.Errorf("a granted %s without a token", op)
	case a.ValidityMs == nil || *a.ValidityMs <= 0:
		return fmt.Errorf("a granted %s without a positive validity_ms", op)
	}
	return nil
}

// Class is the kind of failure an answer reports.
type Class string

// The classes of failure, one table: what each means is in the protocol's
// README, and the sentinel a caller branches on.
var classes = []struct {
	class Class
	err   error
}{
	{Contended, ErrContended},
	{Unavailable, ErrUnavailable},
	{Other, nil},
}

// The failure classes of an answer.
const (
	// Contended: the key is held by another holder (acquire), or no
	// longer by this one (release, extend).
	Contended Class = "contended"
	// Unavailable: too few nodes answered.
	Unavailable Class = "unavailable"
	// Other: anything else (a bad request, a bug in the adapter).
	Other Class = "other"
)

func (c Class) known() bool {
	for _, e := range classes {
		if e.class == c {
			return true
		}
	}
	return false
}

func classNames() []string {
	out := make([]string, len(classes))
	for i, e := range classes {
		out[i] = string(e.class)
	}
	return out
}

// Sentinels for errors.Is.
var (
	// ErrContended: an answer of class Contended.
	ErrContended = errors.New("foreign: contended")
	// ErrUnavailable: an answer of class Unavailable, or the adapter
	// exited (ExitError).
	ErrUnavailable = errors.New("foreign: unavailable")
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("foreign: adapter closed")
)

// AnswerError is the adapter's answer that an operation failed.
type AnswerError struct {
	Op      string
	Class   Class
	Message string
	// Attempts the client made, as the adapter reported them (0: not said).
	Attempts int
}

func (e *AnswerError) Error() string {
	return fmt.Sprintf("foreign: %s: %s: %s", e.Op, e.Class, e.Message)
}

// Is matches the sentinel of the answer's class.
func (e *AnswerError) Is(target error) bool {
	for _, c := range classes {
		if c.class == e.Class && c.err != nil && c.err == target {
			return true
		}
	}
	return false
}

// ExitError is an adapter that exited while the lab still used it: its
// requests are unavailable, not hung.
type ExitError struct {
	Adapter string
	// Err is the process's exit (nil: it exited 0).
	Err error
	// Stderr is the end of what it wrote there.
	Stderr string
}

func (e *ExitError) Error() string {
	how := "exited 0"
	if e.Err != nil {
		how = e.Err.Error()
	}
	return fmt.Sprintf("foreign: adapter %s stopped (%s); its stderr ends: %s", e.Adapter, how, e.Stderr)
}

// Is matches ErrUnavailable.
func (e *ExitError) Is(target error) bool { return target == ErrUnavailable }

// Unwrap returns the process's exit.
func (e *ExitError) Unwrap() error { return e.Err }

// ProtocolError is a line of the adapter's output the protocol does not
// allow. The lab cannot tell what else was lost, so it stops the adapter.
type ProtocolError struct {
	Adapter string
	// Line is the line's number in the adapter's output, from 1 (the hello).
	Line int
	Text string
	Err  error
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("foreign: adapter %s broke the protocol at line %d (%q): %v; it was stopped", e.Adapter, e.Line, e.Text, e.Err)
}

// Unwrap returns what was wrong with the line.
func (e *ProtocolError) Unwrap() error { return e.Err }

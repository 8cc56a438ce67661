package drill

import "github.com/redlocklab/redlocklab/drill/spec"

// The spec language's types and values, which package spec owns (parsing,
// validating and writing drill specs), under the engine's names, so that a
// caller of the engine needs no second import.
type (
	// Spec is one drill.
	Spec = spec.Spec
	// Fault is one scheduled fault.
	Fault = spec.Fault
	// FaultKind names a drill fault.
	FaultKind = spec.FaultKind
	// Workload is the load each guard runs.
	Workload = spec.Workload
	// Window is a named phase of a drill.
	Window = spec.Window
	// Phase names a slice of a drill.
	Phase = spec.Phase
	// Expectation is one condition a guard must meet.
	Expectation = spec.Expectation
	// SpecError is a spec that cannot run, with its file, line and field.
	SpecError = spec.Error
)

// The phases.
const (
	PhaseAll    = spec.PhaseAll
	PhaseBefore = spec.PhaseBefore
	PhaseDuring = spec.PhaseDuring
	PhaseAfter  = spec.PhaseAfter
)

// Phases lists the phases in order.
var Phases = spec.Phases

// ErrSpec is wrapped by every SpecError.
var ErrSpec = spec.ErrInvalid

// ReadFile reads the spec from the front matter of a runbook.
func ReadFile(path string) (*Spec, error) { return spec.ReadFile(path) }

// Parse reads a spec from a runbook's bytes.
func Parse(name string, b []byte) (*Spec, error) { return spec.Parse(name, b) }

// CheckMachines reports why a spec cannot run on a lab of machines.
func CheckMachines(s *Spec) error { return spec.CheckMachines(s) }

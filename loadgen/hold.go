package loadgen

import "github.com/redlocklab/redlocklab/loadgen/loadspec"

// HoldSpec is the time a reservation spends inside its critical section
// (package loadspec).
type HoldSpec = loadspec.HoldSpec

// ParseHold parses a hold distribution.
func ParseHold(s string) (HoldSpec, error) { return loadspec.ParseHold(s) }

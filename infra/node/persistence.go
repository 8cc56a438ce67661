package node

import "github.com/redlocklab/redlocklab/infra/lab/profile"

// Persistence is a node's persistence profile (package profile owns it).
type Persistence = profile.Persistence

// The persistence profiles.
const (
	PersistAlways   = profile.PersistAlways
	PersistEverysec = profile.PersistEverysec
	PersistNoFsync  = profile.PersistNoFsync
	PersistNone     = profile.PersistNone
	PersistMixed    = profile.PersistMixed
)

// ParsePersistence accepts always, everysec, no-fsync or none.
func ParsePersistence(s string) (Persistence, error) { return profile.ParsePersistence(s) }

// ParsePersistenceList parses a comma-separated list of profiles.
func ParsePersistenceList(s string) ([]Persistence, error) { return profile.ParsePersistenceList(s) }

// FormatPersistenceList renders profiles as ParsePersistenceList reads them.
func FormatPersistenceList(ps []Persistence) string { return profile.FormatPersistenceList(ps) }

package profile

import (
	"fmt"
	"strings"
)

// Persistence is a node's persistence profile.
type Persistence string

// The persistence profiles.
const (
	// PersistAlways: AOF with appendfsync always (the documented practice).
	PersistAlways Persistence = "always"
	// PersistEverysec: AOF with appendfsync everysec (up to a second of
	// acknowledged writes can be lost on power loss).
	PersistEverysec Persistence = "everysec"
	// PersistNoFsync: AOF with appendfsync no: Redis never fsyncs it, so a
	// power loss takes what the kernel had not written back (on the
	// power-loss filesystem: everything since the node's start). The
	// negative control of the power-loss drills.
	PersistNoFsync Persistence = "no-fsync"
	// PersistNone: no AOF, no RDB; a restarted node comes back empty.
	PersistNone Persistence = "none"
)

// PersistMixed is what a lab whose nodes have different profiles reports
// as its one profile; it is not a profile.
const PersistMixed Persistence = "mixed"

// Persistences are the profiles, in the order help text lists them.
var Persistences = []Persistence{PersistAlways, PersistEverysec, PersistNoFsync, PersistNone}

// ParsePersistence accepts always, everysec, no-fsync or none.
func ParsePersistence(s string) (Persistence, error) {
	switch p := Persistence(s); p {
	case PersistAlways, PersistEverysec, PersistNoFsync, PersistNone:
		return p, nil
	}
	return "", fmt.Errorf("profile: persistence %q: want always, everysec, no-fsync or none", s)
}

// ParsePersistenceList parses a comma-separated list of profiles, one per
// node ("always,always,everysec,everysec,everysec"), or a single profile
// for every node.
func ParsePersistenceList(s string) ([]Persistence, error) {
	var out []Persistence
	for i, f := range strings.Split(s, ",") {
		p, err := ParsePersistence(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("profile: persistence list %q, item %d: %w", s, i+1, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// FormatPersistenceList renders profiles as ParsePersistenceList reads them.
func FormatPersistenceList(ps []Persistence) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = string(p)
	}
	return strings.Join(parts, ",")
}

// KillNote says plainly what a kill -9 of a node with this profile means,
// and which fault loses what it had not fsynced.
func (p Persistence) KillNote() string {
	switch p {
	case PersistNone:
		return "none: kill -9 (and any restart) loses every key, as a power loss without fsync would: this profile models key loss"
	case PersistEverysec, PersistAlways, PersistNoFsync:
		return string(p) + ": kill -9 keeps page-cache writes: always vs everysec indistinguishable; 'none' models key loss; power-loss cuts what everysec had not fsynced"
	case PersistMixed:
		return "mixed: see each node's profile; kill -9 keeps page-cache writes, power-loss cuts what everysec had not fsynced, none loses every key"
	}
	return string(p) + ": not a lab profile"
}

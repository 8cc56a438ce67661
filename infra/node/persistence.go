package node

import (
	"fmt"
	"strings"
)

// Persistence is a lab persistence profile.
type Persistence string

// The persistence profiles.
const (
	// PersistAlways: AOF with appendfsync always (the documented practice).
	PersistAlways Persistence = "always"
	// PersistEverysec: AOF with appendfsync everysec (up to a second of
	// acknowledged writes can be lost on power loss).
	PersistEverysec Persistence = "everysec"
	// PersistNone: no AOF, no RDB; a restarted node comes back empty.
	PersistNone Persistence = "none"
)

// ParsePersistence accepts always, everysec or none.
func ParsePersistence(s string) (Persistence, error) {
	switch p := Persistence(s); p {
	case PersistAlways, PersistEverysec, PersistNone:
		return p, nil
	}
	return "", fmt.Errorf("node: persistence %q: want always, everysec or none", s)
}

// PersistMixed is what Lab.Persistence reports for a lab whose nodes
// have different profiles; it is not a profile.
const PersistMixed Persistence = "mixed"

// ParsePersistenceList parses a comma-separated list of profiles, one per
// node ("always,always,everysec,everysec,everysec"), or a single profile
// for every node.
func ParsePersistenceList(s string) ([]Persistence, error) {
	var out []Persistence
	for i, f := range strings.Split(s, ",") {
		p, err := ParsePersistence(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("node: persistence list %q, item %d: %w", s, i+1, err)
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
	case PersistEverysec, PersistAlways:
		return string(p) + ": kill -9 keeps page-cache writes: always vs everysec indistinguishable; 'none' models key loss; power-loss cuts what everysec had not fsynced"
	case PersistMixed:
		return "mixed: see each node's profile; kill -9 keeps page-cache writes, power-loss cuts what everysec had not fsynced, none loses every key"
	}
	return string(p) + ": not a lab profile"
}

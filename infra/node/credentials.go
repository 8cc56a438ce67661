package node

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/redlocklab/redlocklab/internal/atomicfile"
)

// The lab's nodes run with the ACL infra/modules/redis-node renders for a
// real VM: the default user is off, and every client logs in as one of
// these users. The passwords are generated (crypto/rand) by the first
// `lab up`, kept in the state directory's CredentialsFile (mode 0600) and
// reused by every later `lab up`; `lab down` removes the file. Terraform
// gets them as sensitive variables through a var file, never on a command
// line; only their SHA-256 reaches redis.conf.
const (
	// CredentialsFile is the file, in the state directory, holding the
	// nodes' ACL users and passwords (JSON: Credentials).
	CredentialsFile = "credentials.json"
)

// The ACL user names. redlock and monitor are rendered by redis-node as for
// a real VM; admin is the lab's own.
const (
	UserRedlock = "redlock"
	UserMonitor = "monitor"
	UserAdmin   = "admin"
)

// minPasswordLen is redis-node's rule for its passwords.
const minPasswordLen = 16

// ErrNoCredentials is returned when a lab has no credentials file: it is
// down, or was made before the lab had ACLs (a `lab up` makes one).
var ErrNoCredentials = errors.New("node: no credentials file")

// User is one ACL user and its password.
type User struct {
	Name     string `json:"user"`
	Password string `json:"password"`
}

// Credentials are a lab's ACL users. What each may do:
//
//   - Redlock takes locks: SET NX PX on keys under "lock:", GET/DEL/PEXPIRE/
//     PTTL, EVAL/EVALSHA/SCRIPT LOAD of the release and extend scripts,
//     PING, TIME and the connection handshake (HELLO, AUTH, CLIENT
//     SETNAME). Nothing else: a plain SET foo bar is refused.
//   - Monitor reads: INFO, CONFIG GET, TIME, ROLE, CLIENT LIST, SLOWLOG,
//     LATENCY (what `redlab doctor` and an exporter need). No key.
//   - Admin is the lab's own user, not rendered for a real VM: every
//     command on every key. The supervisor uses it for its readiness PING
//     and the clock-jump and clock-rate models (SCAN, PTTL, PEXPIRE, DEL
//     over the whole keyspace); experiments and tests may use it too.
type Credentials struct {
	Redlock User `json:"redlock"`
	Monitor User `json:"monitor"`
	Admin   User `json:"admin"`
}

// Validate checks the user names and that every password is long enough.
func (c Credentials) Validate() error {
	for _, u := range []struct {
		got  User
		want string
	}{{c.Redlock, UserRedlock}, {c.Monitor, UserMonitor}, {c.Admin, UserAdmin}} {
		if u.got.Name != u.want {
			return fmt.Errorf("node: credentials: user %q, want %q", u.got.Name, u.want)
		}
		if len(u.got.Password) < minPasswordLen {
			return fmt.Errorf("node: credentials: %s's password is shorter than %d characters", u.want, minPasswordLen)
		}
	}
	return nil
}

// ReadCredentials reads a credentials file (CredentialsFile in a state
// directory, or the path in $REDLAB_CREDENTIALS). A missing file is
// ErrNoCredentials.
func ReadCredentials(path string) (Credentials, error) {
	var c Credentials
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, fmt.Errorf("%w: %s", ErrNoCredentials, path)
	}
	if err != nil {
		return c, fmt.Errorf("node: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("node: credentials %s: %w", path, err)
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("%w (%s)", err, path)
	}
	return c, nil
}

// EnsureCredentials returns the credentials in stateDir, making them the
// first time. A file that exists but does not read is an error, not
// replaced: the running nodes were rendered with its passwords.
func EnsureCredentials(stateDir string) (Credentials, error) {
	path := filepath.Join(stateDir, CredentialsFile)
	c, err := ReadCredentials(path)
	if !errors.Is(err, ErrNoCredentials) {
		return c, err
	}
	if c, err = NewCredentials(); err != nil {
		return c, err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return c, err
	}
	if err := atomicfile.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		return c, fmt.Errorf("node: credentials: %w", err)
	}
	return c, nil
}

// NewCredentials makes new credentials with random passwords.
func NewCredentials() (Credentials, error) {
	c := Credentials{Redlock: User{Name: UserRedlock}, Monitor: User{Name: UserMonitor}, Admin: User{Name: UserAdmin}}
	for _, u := range []*User{&c.Redlock, &c.Monitor, &c.Admin} {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return c, fmt.Errorf("node: credentials: %w", err)
		}
		u.Password = hex.EncodeToString(b)
	}
	return c, nil
}

package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/infra/node"
)

// login is how a command logs in to the lock nodes, in this order:
//
//   - --username, with the password in $REDLAB_PASSWORD (never a flag: ps
//     would show it), for nodes of your own;
//   - the lab's credentials file named by $REDLAB_CREDENTIALS (which
//     `redlab lab up` exports), as the user of the command's role: redlock
//     for commands that take locks, monitor for the doctor;
//   - no login (nodes without ACLs).
type login struct {
	username string
	role     string // node.UserRedlock or node.UserMonitor
}

func (l *login) register(fs *pflag.FlagSet, role string) {
	l.role = role
	fs.StringVar(&l.username, "username", "", fmt.Sprintf("ACL user to log in to the nodes as, with the password in $%s (default: the %s user of the lab's $%s, if set)",
		envPassword, role, lab.CredentialsEnv))
}

// resolve returns the user and password, or a usage error.
func (l *login) resolve() (user, password string, err error) {
	password = os.Getenv(envPassword)
	if l.username != "" {
		if password == "" {
			return "", "", usageErrorf("--username %s needs the password in $%s", l.username, envPassword)
		}
		return l.username, password, nil
	}
	if password != "" {
		return "", password, nil // the default user, as redis-cli -a does
	}
	path := os.Getenv(lab.CredentialsEnv)
	if path == "" {
		return "", "", nil
	}
	c, err := node.ReadCredentials(path)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, node.ErrNoCredentials) {
		return "", "", usageErrorf("$%s=%s: no such credentials file: is the lab down? (unset it, or run `redlab lab up`)", lab.CredentialsEnv, path)
	}
	if err != nil {
		return "", "", usageErrorf("$%s: %v", lab.CredentialsEnv, err)
	}
	u := c.Redlock
	if l.role == node.UserMonitor {
		u = c.Monitor
	}
	return u.Name, u.Password, nil
}

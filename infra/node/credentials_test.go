package node

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEnsureCredentials(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, CredentialsFile)
	if _, err := ReadCredentials(path); !errors.Is(err, ErrNoCredentials) {
		t.Fatalf("no file: got %v, want ErrNoCredentials", err)
	}
	first, err := EnsureCredentials(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	seen := map[string]bool{}
	for _, u := range []User{first.Redlock, first.Monitor, first.Admin} {
		if len(u.Password) < minPasswordLen || seen[u.Password] {
			t.Errorf("user %s: password %q, want %d+ characters, different for every user", u.Name, u.Password, minPasswordLen)
		}
		seen[u.Password] = true
	}
	again, err := EnsureCredentials(dir)
	if err != nil || again != first {
		t.Errorf("second call: got %+v, %v; want the same credentials", again, err)
	}
	read, err := ReadCredentials(path)
	if err != nil || read != first {
		t.Errorf("ReadCredentials: got %+v, %v; want what was written", read, err)
	}
	other, err := EnsureCredentials(t.TempDir())
	if err != nil || other.Redlock.Password == first.Redlock.Password {
		t.Errorf("another lab: got %+v, %v; want other passwords", other, err)
	}
}

func TestReadCredentialsRefusesBadFiles(t *testing.T) {
	good, err := NewCredentials()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		change func(*Credentials)
		raw    string
		want   string
	}{
		{name: "short password", change: func(c *Credentials) { c.Monitor.Password = "short" }, want: "monitor's password is shorter"},
		{name: "wrong user", change: func(c *Credentials) { c.Redlock.Name = "default" }, want: `user "default", want "redlock"`},
		{name: "missing admin", change: func(c *Credentials) { c.Admin = User{} }, want: `want "admin"`},
		{name: "not json", raw: "{", want: "credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := []byte(tt.raw)
			if tt.change != nil {
				c := good
				tt.change(&c)
				b, _ = json.Marshal(c)
			}
			dir := t.TempDir()
			path := filepath.Join(dir, CredentialsFile)
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := ReadCredentials(path); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
			// A broken file is not replaced: the nodes were rendered with it.
			if _, err := EnsureCredentials(dir); err == nil {
				t.Error("EnsureCredentials over a broken file: got no error, want one")
			}
		})
	}
}

package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// nodesFlag is the --nodes value every subcommand shares: ADDR[,ADDR…], each
// host:port. When the flag is absent, REDLAB_NODES (as printed by
// `redlab lab up`) is used.
type nodesFlag []string

func (f *nodesFlag) String() string { return strings.Join(*f, ",") }

func (f *nodesFlag) Type() string { return "ADDR[,ADDR...]" }

func (f *nodesFlag) Set(s string) error {
	addrs, err := parseNodes(s)
	if err != nil {
		return err
	}
	*f = addrs
	return nil
}

// orEnv returns the flag's nodes, or those of REDLAB_NODES when the flag was
// not given. It fails when neither names a node.
func (f nodesFlag) orEnv() ([]string, error) {
	if len(f) > 0 {
		return f, nil
	}
	if v := os.Getenv("REDLAB_NODES"); v != "" {
		addrs, err := parseNodes(v)
		if err != nil {
			return nil, fmt.Errorf("REDLAB_NODES: %w", err)
		}
		return addrs, nil
	}
	return nil, fmt.Errorf("--nodes is required (or set REDLAB_NODES)")
}

func parseNodes(s string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, a := range strings.Split(s, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("node %q: want host:port: %w", a, err)
		}
		if host == "" {
			return nil, fmt.Errorf("node %q: empty host", a)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return nil, fmt.Errorf("node %q: port must be 1-65535", a)
		}
		if seen[a] {
			return nil, fmt.Errorf("node %q listed twice", a)
		}
		seen[a] = true
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no nodes in %q", s)
	}
	return out, nil
}

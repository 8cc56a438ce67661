package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

func newVersionCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print redlab's version, commit and Go version",
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(e.stdout, buildVersion())
			return err
		},
	}
}

// version is what the binary knows about its build.
type version struct {
	version  string // module version, or "devel"
	commit   string // vcs.revision, or "unknown"
	modified bool   // vcs.modified: built from a tree with local changes
	goVer    string
	platform string
}

// buildVersion reads the running binary's build information. A `go build`
// inside the repository stamps the commit; `go install module@version` the
// version; a test binary or -buildvcs=false neither.
func buildVersion() version {
	bi, _ := debug.ReadBuildInfo()
	return versionOf(bi)
}

// versionOf reads bi, which may be nil.
func versionOf(bi *debug.BuildInfo) version {
	v := version{version: "devel", commit: "unknown", goVer: runtime.Version(), platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi == nil {
		return v
	}
	if bi.GoVersion != "" {
		v.goVer = bi.GoVersion
	}
	if m := bi.Main.Version; m != "" && m != "(devel)" {
		v.version = m
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.commit = s.Value
		case "vcs.modified":
			v.modified = s.Value == "true"
		}
	}
	return v
}

// String is one line: "redlab devel, commit 7815cac… (modified), go1.26.0 linux/amd64".
func (v version) String() string {
	commit := v.commit
	if v.modified {
		commit += " (modified)"
	}
	return fmt.Sprintf("redlab %s, commit %s, %s %s", v.version, commit, v.goVer, v.platform)
}

// recordedCommit is the commit a command records with its results: the
// binary's, or, when it was built without one (-buildvcs=false, a test
// binary), the working tree's HEAD, marked (modified) when it has changes;
// "unknown" outside a git tree.
func recordedCommit() string {
	v := buildVersion()
	if v.commit != "unknown" {
		if v.modified {
			return v.commit + " (modified)"
		}
		return v.commit
	}
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	commit := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		commit += " (modified)"
	}
	return commit
}

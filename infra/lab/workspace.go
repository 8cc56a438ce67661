// The lab's Terraform workspace: the infra directory found, staged into the
// state directory (copied only when it changed), and a Terraform wrapper on it.

package lab

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

func newWorkspaceTerraform(bin, root, stateDir string, log io.Writer) (*Terraform, *os.File, error) {
	logf, err := os.OpenFile(filepath.Join(stateDir, tfLogName), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("lab: %w", err)
	}
	w := io.Writer(logf)
	if log != nil {
		w = io.MultiWriter(logf, log)
	}
	tf, err := NewTerraform(bin, root, w)
	if err != nil {
		logf.Close()
		return nil, nil, err
	}
	return tf, logf, nil
}

// FindInfraDir returns the repository's infra directory: $REDLAB_INFRA_DIR,
// else the first infra/ holding envs/local/main.tf in the current directory
// or above it, else next to or above the running executable.
func FindInfraDir() (string, error) {
	if d := os.Getenv("REDLAB_INFRA_DIR"); d != "" {
		if !fileExists(filepath.Join(d, rootModule, "main.tf")) {
			return "", fmt.Errorf("lab: REDLAB_INFRA_DIR=%s has no %s/main.tf", d, rootModule)
		}
		return filepath.Abs(d)
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, s := range starts {
		for d := s; ; d = filepath.Dir(d) {
			if fileExists(filepath.Join(d, "infra", rootModule, "main.tf")) {
				return filepath.Join(d, "infra"), nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", errors.New("lab: cannot find infra/envs/local: run from the repository, or set REDLAB_INFRA_DIR / --infra-dir")
}

// stageWorkspace copies the root module and the node module from infraDir
// into ws with the same relative layout, so that "../../modules/redis-node"
// resolves, and keeps the root module's .terraform and state. It returns
// the copied root module and whether its files differ from the last init.
func stageWorkspace(infraDir, ws string) (root string, changed bool, err error) {
	root = filepath.Join(ws, rootModule)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", false, fmt.Errorf("lab: %w", err)
	}
	// Remove the previous copy's files, not its .terraform or state.
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), "terraform.tfstate") && !strings.HasPrefix(e.Name(), ".") {
			os.Remove(filepath.Join(root, e.Name()))
		}
	}
	if err := os.RemoveAll(filepath.Join(ws, nodeModule)); err != nil {
		return "", false, fmt.Errorf("lab: %w", err)
	}
	if err := copyModule(filepath.Join(infraDir, rootModule), root, false); err != nil {
		return "", false, err
	}
	if err := copyModule(filepath.Join(infraDir, nodeModule), filepath.Join(ws, nodeModule), true); err != nil {
		return "", false, err
	}
	if err := os.RemoveAll(filepath.Join(ws, etcdModule)); err != nil {
		return "", false, fmt.Errorf("lab: %w", err)
	}
	if err := copyModule(filepath.Join(infraDir, etcdModule), filepath.Join(ws, etcdModule), true); err != nil {
		return "", false, err
	}
	old, _ := os.ReadFile(filepath.Join(root, ".staged-hash"))
	return root, string(old) != changedHash(root), nil
}

// copyModule copies a module's files: everything but hidden entries, state,
// tests/ and examples/ (and, for the root module, subdirectories).
func copyModule(src, dst string, recursive bool) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("lab: copy module: %w", err)
		}
		rel, _ := filepath.Rel(src, p)
		name := d.Name()
		if rel != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "terraform.tfstate")) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if rel != "." && (!recursive || name == "tests" || name == "examples") {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() || strings.HasSuffix(name, ".go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("lab: copy module: %w", err)
		}
		info, err := d.Info()
		if err != nil {
			return fmt.Errorf("lab: copy module: %w", err)
		}
		return os.WriteFile(filepath.Join(dst, rel), b, info.Mode().Perm())
	})
}

// changedHash hashes the staged files (the root module's and, through
// "..", the node module's) so that init runs only when they change.
func changedHash(root string) string {
	h := sha256.New()
	ws := filepath.Dir(filepath.Dir(root))
	_ = filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		name := d.Name()
		if d.IsDir() && (name == ".terraform") {
			return filepath.SkipDir
		}
		if d.IsDir() || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "terraform.tfstate") {
			return nil
		}
		b, _ := os.ReadFile(p)
		rel, _ := filepath.Rel(ws, p)
		fmt.Fprintf(h, "%s\x00%d\x00", rel, len(b))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))
}

package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/hashicorp/terraform-exec/tfexec"
)

// ErrNoTerraform is returned when no OpenTofu or Terraform binary can be found.
var ErrNoTerraform = errors.New("lab: no tofu or terraform binary found: install OpenTofu, put terraform on PATH, set REDLAB_TF, or run `make tools` (builds ./bin/tofu)")

// FindTerraform returns the binary the lab drives: $REDLAB_TF when set, else
// tofu on PATH, else terraform on PATH, else bin/tofu under the current
// directory or under any of extraRoots (e.g. the repository root).
func FindTerraform(extraRoots ...string) (string, error) {
	return findTerraform(os.Getenv, exec.LookPath, append([]string{"."}, extraRoots...))
}

func findTerraform(getenv func(string) string, lookPath func(string) (string, error), roots []string) (string, error) {
	if p := getenv("REDLAB_TF"); p != "" {
		if err := executable(p); err != nil {
			return "", fmt.Errorf("lab: REDLAB_TF=%s: %w", p, err)
		}
		return p, nil
	}
	for _, name := range []string{"tofu", "terraform"} {
		if p, err := lookPath(name); err == nil {
			return p, nil
		}
	}
	for _, r := range roots {
		p := filepath.Join(r, "bin", "tofu")
		if executable(p) == nil {
			if abs, err := filepath.Abs(p); err == nil {
				p = abs
			}
			return p, nil
		}
	}
	return "", ErrNoTerraform
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("not an executable file")
	}
	return nil
}

// TerraformError is a failed tofu/terraform command, with what the binary
// printed on stderr.
type TerraformError struct {
	Op     string // init, apply, output or destroy
	Binary string
	Stderr string
	Err    error
}

// Error names the binary and the command, and appends its stderr.
func (e *TerraformError) Error() string {
	cause := e.Err.Error()
	// tfexec appends stderr to the exit error's text; show it once.
	var exit *exec.ExitError
	if errors.As(e.Err, &exit) {
		cause = exit.Error()
	}
	msg := fmt.Sprintf("lab: %s %s: %s", filepath.Base(e.Binary), e.Op, cause)
	if s := strings.TrimSpace(e.Stderr); s != "" {
		msg += "\n" + tail(s, 4000)
	}
	return msg
}

// Unwrap returns the underlying error; a cancelled context stays
// errors.Is-able as context.Canceled.
func (e *TerraformError) Unwrap() error { return e.Err }

// Terraform drives one root module with tofu or terraform. Its methods are
// safe for concurrent use but run one command at a time. Cancelling a
// method's context sends the child SIGINT, as a user's Ctrl-C would.
type Terraform struct {
	bin string
	dir string
	tf  *tfexec.Terraform

	mu       sync.Mutex
	stderr   bytes.Buffer
	varFiles []string
}

// NewTerraform prepares to run bin in the root module dir. Both stdout and
// stderr of every command are copied to log (nil discards them); stderr is
// also attached to errors.
func NewTerraform(bin, dir string, log io.Writer) (*Terraform, error) {
	if log == nil {
		log = io.Discard
	}
	tf, err := tfexec.NewTerraform(dir, bin)
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	// The lab never talks to HashiCorp's checkpoint service.
	env["CHECKPOINT_DISABLE"] = "1"
	// A CLI configuration file that does not exist only earns a warning,
	// which OpenTofu prints on stdout, into `output -json`.
	if p := env["TF_CLI_CONFIG_FILE"]; p != "" {
		if _, err := os.Stat(p); err != nil {
			delete(env, "TF_CLI_CONFIG_FILE")
		}
	}
	if err := tf.SetEnv(tfexec.CleanEnv(env)); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	t := &Terraform{bin: bin, dir: dir, tf: tf}
	tf.SetStdout(log)
	tf.SetStderr(io.MultiWriter(log, &t.stderr))
	return t, nil
}

// SetVarFiles makes every later apply and destroy read these var files
// (-var-file), for values that must not appear on a command line, where
// any local user can read them.
func (t *Terraform) SetVarFiles(paths ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.varFiles = append([]string(nil), paths...)
}

// Binary returns the path of the tofu/terraform executable.
func (t *Terraform) Binary() string { return t.bin }

// Init runs `init`: modules are local, no provider is downloaded.
func (t *Terraform) Init(ctx context.Context) error {
	return t.run(ctx, "init", func(ctx context.Context) error {
		return t.tf.Init(ctx, initOptions()...)
	})
}

// Apply runs `apply -auto-approve` with the variables, replacing the
// resources at the replace addresses.
func (t *Terraform) Apply(ctx context.Context, vars map[string]string, replace ...string) error {
	return t.run(ctx, "apply", func(ctx context.Context) error {
		return t.tf.Apply(ctx, applyOptions(vars, t.varFiles, replace)...)
	})
}

// Destroy runs `destroy -auto-approve` with the variables.
func (t *Terraform) Destroy(ctx context.Context, vars map[string]string) error {
	return t.run(ctx, "destroy", func(ctx context.Context) error {
		return t.tf.Destroy(ctx, destroyOptions(vars, t.varFiles)...)
	})
}

// Output returns every root module output's JSON value.
func (t *Terraform) Output(ctx context.Context) (map[string]json.RawMessage, error) {
	var out map[string]json.RawMessage
	err := t.run(ctx, "output", func(ctx context.Context) error {
		meta, err := t.tf.Output(ctx)
		if err != nil {
			return err
		}
		out = make(map[string]json.RawMessage, len(meta))
		for k, m := range meta {
			out[k] = m.Value
		}
		return nil
	})
	return out, err
}

func (t *Terraform) run(ctx context.Context, op string, f func(context.Context) error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stderr.Reset()
	if err := f(ctx); err != nil {
		return &TerraformError{Op: op, Binary: t.bin, Stderr: t.stderr.String(), Err: err}
	}
	return nil
}

func initOptions() []tfexec.InitOption {
	return []tfexec.InitOption{tfexec.Backend(true), tfexec.Get(true), tfexec.Upgrade(false)}
}

func applyOptions(vars map[string]string, varFiles, replace []string) []tfexec.ApplyOption {
	var opts []tfexec.ApplyOption
	for _, r := range replace {
		opts = append(opts, tfexec.Replace(r))
	}
	for _, f := range varFiles {
		opts = append(opts, tfexec.VarFile(f))
	}
	for _, v := range varArgs(vars) {
		opts = append(opts, tfexec.Var(v))
	}
	return opts
}

func destroyOptions(vars map[string]string, varFiles []string) []tfexec.DestroyOption {
	var opts []tfexec.DestroyOption
	for _, f := range varFiles {
		opts = append(opts, tfexec.VarFile(f))
	}
	for _, v := range varArgs(vars) {
		opts = append(opts, tfexec.Var(v))
	}
	return opts
}

// varArgs renders vars as sorted name=value pairs, so argv is deterministic.
func varArgs(vars map[string]string) []string {
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k + "=" + vars[k]
	}
	return out
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

package plan

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"
)

// AWSRoot is the root module the tfvars are for, under the infra
// directory.
const AWSRoot = "envs/aws"

// CheckTFVars checks the terraform.tfvars at path against infra/envs/aws
// (under infraDir) with the terraform (or tofu) binary: every name must be
// a variable the root module declares, and terraform must accept the
// values, by their types and by every validation block, the root module's
// and those of the modules it passes them to.
//
// The root module needs the aws provider to init, which needs a registry.
// So the check runs on a copy that keeps what decides about variables (the
// root module's variable blocks, its module calls as written, the called
// modules' variable blocks) and drops the provider, the resources and the
// outputs: `init`, `validate`, then `plan` with the module's example
// tfvars and path on top. It returns what terraform said, or why not.
func CheckTFVars(ctx context.Context, terraform, infraDir, path string) (string, error) {
	root, err := filepath.Abs(filepath.Join(infraDir, AWSRoot))
	if err != nil {
		return "", fmt.Errorf("plan: %w", err)
	}
	declared, err := declaredVariables(root)
	if err != nil {
		return "", err
	}
	names, err := tfvarsNames(path)
	if err != nil {
		return "", err
	}
	var unknown []string
	for _, n := range names {
		if !slices.Contains(declared, n) {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		return "", fmt.Errorf("plan: %s sets %s, which %s does not declare", path, strings.Join(unknown, ", "), AWSRoot)
	}
	dir, err := os.MkdirTemp("", "redlab-tfvars-")
	if err != nil {
		return "", fmt.Errorf("plan: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := variablesCopy(root, dir); err != nil {
		return "", err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("plan: %w", err)
	}
	// Passwords are never in tfvars: stand-ins of the length the modules
	// require.
	secret := strings.Repeat("x", 24)
	steps := [][]string{
		{"init", "-backend=false", "-input=false", "-no-color"},
		{"validate", "-no-color"},
		{"plan", "-input=false", "-lock=false", "-refresh=false", "-no-color", "-var-file=" + filepath.Join(root, "terraform.tfvars.example"),
			"-var-file=" + abs, "-var=redlock_password=" + secret, "-var=monitor_password=" + secret},
	}
	var said string
	for _, args := range steps {
		out, err := runTerraform(ctx, terraform, dir, args...)
		if err != nil {
			return "", err
		}
		said = out
	}
	if !strings.Contains(said, "No changes") {
		return "", fmt.Errorf("plan: %s plan of %s's variables: want no changes, got:\n%s", filepath.Base(terraform), AWSRoot, said)
	}
	return fmt.Sprintf("%s init, validate and plan of %s's variables and module call accepted %s", filepath.Base(terraform), AWSRoot, filepath.Base(path)), nil
}

// declaredVariables are the names of the variable blocks of the module in
// dir.
func declaredVariables(dir string) ([]string, error) {
	files, err := moduleFiles(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		for _, b := range f.Body().Blocks() {
			if b.Type() == "variable" && len(b.Labels()) == 1 {
				out = append(out, b.Labels()[0])
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("plan: %s declares no variable", dir)
	}
	return out, nil
}

// tfvarsNames are the names a tfvars file sets.
func tfvarsNames(path string) ([]string, error) {
	f, diags := hclparse.NewParser().ParseHCLFile(path)
	if diags.HasErrors() {
		return nil, fmt.Errorf("plan: %s: %s", path, diags.Error())
	}
	attrs, diags := f.Body.JustAttributes()
	if diags.HasErrors() {
		return nil, fmt.Errorf("plan: %s: %s", path, diags.Error())
	}
	var out []string
	for name := range attrs {
		out = append(out, name)
	}
	slices.Sort(out)
	return out, nil
}

func moduleFiles(dir string) ([]*hclwrite.File, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.tf"))
	if err != nil || len(paths) == 0 {
		return nil, fmt.Errorf("plan: no .tf files in %s", dir)
	}
	var out []*hclwrite.File
	for _, p := range paths {
		src, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("plan: %w", err)
		}
		f, diags := hclwrite.ParseConfig(src, p, hcl.InitialPos)
		if diags.HasErrors() {
			return nil, fmt.Errorf("plan: %s: %s", p, diags.Error())
		}
		out = append(out, f)
	}
	return out, nil
}

// variablesCopy writes into dst the root module in src reduced to its
// variables, locals and module calls, each called module reduced to its
// variables (under dst/modules/NAME).
func variablesCopy(src, dst string) error {
	files, err := moduleFiles(src)
	if err != nil {
		return err
	}
	out := hclwrite.NewEmptyFile()
	for _, f := range files {
		for _, b := range f.Body().Blocks() {
			switch b.Type() {
			case "variable", "locals":
				out.Body().AppendBlock(b)
			case "module":
				source, err := moduleSource(b)
				if err != nil {
					return err
				}
				name := filepath.Base(source)
				if err := variablesOnly(filepath.Join(src, source), filepath.Join(dst, "modules", name)); err != nil {
					return err
				}
				b.Body().SetAttributeValue("source", cty.StringVal("./modules/"+name))
				out.Body().AppendBlock(b)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dst, "main.tf"), out.Bytes(), 0o644); err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	return nil
}

// moduleSource is a module call's local source path.
func moduleSource(b *hclwrite.Block) (string, error) {
	a := b.Body().GetAttribute("source")
	if a == nil {
		return "", fmt.Errorf("plan: module %s has no source", strings.Join(b.Labels(), " "))
	}
	expr, diags := hclsyntax.ParseExpression(a.Expr().BuildTokens(nil).Bytes(), "source", hcl.InitialPos)
	if diags.HasErrors() {
		return "", fmt.Errorf("plan: module %s: %s", strings.Join(b.Labels(), " "), diags.Error())
	}
	v, diags := expr.Value(nil)
	if diags.HasErrors() || v.Type() != cty.String || !strings.HasPrefix(v.AsString(), ".") {
		return "", fmt.Errorf("plan: module %s: want a local source path", strings.Join(b.Labels(), " "))
	}
	return v.AsString(), nil
}

// variablesOnly writes the variable blocks of the module in src to
// dst/variables.tf.
func variablesOnly(src, dst string) error {
	files, err := moduleFiles(src)
	if err != nil {
		return err
	}
	out := hclwrite.NewEmptyFile()
	for _, f := range files {
		for _, b := range f.Body().Blocks() {
			if b.Type() == "variable" {
				out.Body().AppendBlock(b)
			}
		}
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dst, "variables.tf"), out.Bytes(), 0o644); err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	return nil
}

// runTerraform runs bin in dir, offline and without prompts, and returns
// its stdout; a failure carries its stderr. A cancelled ctx interrupts it
// as Ctrl-C would.
func runTerraform(ctx context.Context, bin, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1", "TF_INPUT=0", "TF_DATA_DIR="+filepath.Join(dir, ".terraform"))
	// A CLI configuration file that does not exist only earns a warning.
	if p := os.Getenv("TF_CLI_CONFIG_FILE"); p != "" {
		if _, err := os.Stat(p); err != nil {
			cmd.Env = append(cmd.Env, "TF_CLI_CONFIG_FILE=")
		}
	}
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("plan: %s %s: %w", filepath.Base(bin), args[0], errors.Join(ctx.Err(), err))
		}
		return "", fmt.Errorf("plan: %s %s: %w\n%s%s", filepath.Base(bin), args[0], err, strings.TrimSpace(stderr.String()), tailOf(stdout.String()))
	}
	return stdout.String(), nil
}

func tailOf(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	if s == "" {
		return ""
	}
	return "\n" + s
}

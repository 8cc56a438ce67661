package hostfault

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the runbooks' hostfault blocks from the table")

var blockRE = regexp.MustCompile("(?s)<!-- host(fault|weaken) ([a-z-]+) -->\n```sh\n(.*?)```\n<!-- /host(?:fault|weaken) -->")

// adHoc are fault commands typed by hand; a runbook shows the backend's
// table instead (its blocks), so that what it tells an operator is what
// redlab runs.
var adHoc = regexp.MustCompile(`iptables |tc qdisc|kill -9|sysrq-trigger|/proc/sys/kernel/sysrq|date -s|systemctl kill|stop-instances --force|pidof redis|sed -i|REDIS_GUARD_DELAY=0' \|`)

func runbookFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "runbooks", "drills", "*.md"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no runbooks (%v)", err)
	}
	return append(files, filepath.Join("..", "..", "runbooks", "README.md"))
}

// TestRunbookCommands: every hostfault block of a runbook is the table's
// (go test -run TestRunbookCommands -update rewrites them); every
// `redlab fault KIND ... --hosts` a runbook shows has its block in the same
// file; and no real-VM section types a fault command by hand.
func TestRunbookCommands(t *testing.T) {
	blocks := 0
	for _, path := range runbookFiles(t) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		name := filepath.Base(path)
		shown := map[string]bool{}
		out := blockRE.ReplaceAllStringFunc(text, func(m string) string {
			sub := blockRE.FindStringSubmatch(m)
			what, kind, got := sub[1], sub[2], sub[3]
			blocks++
			shown[kind] = true
			render := RunbookBlock
			if what == "weaken" {
				render = WeakeningBlock
			}
			want, err := render(kind)
			if err != nil {
				t.Errorf("%s: block %s: %v", name, kind, err)
				return m
			}
			if got != want && !*update {
				t.Errorf("%s: block %s differs from the table:\n got: %q\nwant: %q\n(go test ./infra/hostfault -run TestRunbookCommands -update)", name, kind, got, want)
			}
			return "<!-- host" + what + " " + kind + " -->\n```sh\n" + want + "```\n<!-- /host" + what + " -->"
		})
		if *update && out != text {
			if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for _, m := range regexp.MustCompile(`redlab fault ([a-z-]+)[^\n]*--hosts`).FindAllStringSubmatch(text, -1) {
			if _, ok := Lookup(m[1]); ok && !shown[m[1]] {
				t.Errorf("%s: shows `redlab fault %s --hosts` without its hostfault block", name, m[1])
			}
		}
		for _, sec := range realVMSections(blockRE.ReplaceAllString(text, "")) {
			for _, line := range codeLines(sec) {
				if adHoc.MatchString(line) {
					t.Errorf("%s: a fault typed by hand: %q: use redlab fault --hosts and its block", name, line)
				}
			}
		}
		for _, line := range strings.Split(blockRE.ReplaceAllString(text, ""), "\n") {
			if stale.MatchString(line) {
				t.Errorf("%s: stale instruction %q: stop-instances --force tries a graceful OS shutdown first (the hard stop is --skip-os-shutdown), and root writes /proc/sysrq-trigger whatever kernel.sysrq says", name, line)
			}
		}
	}
	if blocks == 0 {
		t.Error("no hostfault block in any runbook")
	}
}

// stale are two instructions the runbooks once gave that were wrong.
var stale = regexp.MustCompile(`stop-instances --force|> /proc/sys/kernel/sysrq`)

// codeLines returns the lines of the fenced code blocks in text.
func codeLines(text string) []string {
	var out []string
	in := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			in = !in
			continue
		}
		if in {
			out = append(out, l)
		}
	}
	return out
}

// realVMSections returns the bodies of the "Run it on real VMs" sections,
// and of the README's sections about VMs.
func realVMSections(text string) []string {
	var out []string
	lines := strings.Split(text, "\n")
	in := false
	var cur []string
	for _, l := range lines {
		if strings.HasPrefix(l, "## ") || strings.HasPrefix(l, "### ") {
			if in {
				out = append(out, strings.Join(cur, "\n"))
			}
			in = strings.Contains(l, "real VMs") || strings.Contains(l, "Weakening") || strings.Contains(l, "Power cut")
			cur = nil
			continue
		}
		if in {
			cur = append(cur, l)
		}
	}
	if in {
		out = append(out, strings.Join(cur, "\n"))
	}
	return out
}

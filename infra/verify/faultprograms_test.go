package verify

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/hostfault"
	"github.com/redlocklab/redlocklab/infra/hosts"
	"github.com/redlocklab/redlocklab/infra/machine"
)

// programPackage is the Debian 12 package of every program the faults over
// SSH run. A program missing here fails the test: add it with its package
// (`dpkg -S $(command -v PROGRAM)` on a Debian 12 host, which the test
// checks where the program is installed).
var programPackage = map[string]string{
	"awk":         "mawk",
	"basename":    "coreutils",
	"cat":         "coreutils",
	"cp":          "coreutils",
	"grep":        "grep",
	"ip":          "iproute2",
	"iptables":    "iptables",
	"ls":          "coreutils",
	"mkdir":       "coreutils",
	"python3":     "python3-minimal",
	"rm":          "coreutils",
	"sed":         "sed",
	"sh":          "dash",
	"sort":        "coreutils",
	"sync":        "coreutils",
	"systemctl":   "systemd",
	"systemd-run": "systemd",
	"tc":          "iproute2",
	"tr":          "coreutils",
}

// installedWith names, for a package above, the package of the user data
// that depends on it and so installs it.
var installedWith = map[string]string{
	"python3-minimal": "python3",
}

// basePackages are the packages above that are Debian's base system: of
// priority required or important, which every Debian install, a cloud
// image included, has (debootstrap's default variant).
var basePackages = map[string]string{
	"coreutils": "required",
	"dash":      "required",
	"grep":      "required",
	"mawk":      "required",
	"sed":       "required",
	"iproute2":  "important",
	"systemd":   "important",
}

// faultScripts returns every script the faults over SSH send to a VM: each
// kind's injection (with the heal file it writes), a heal, the heal of
// everything, the weakenings and their restore.
func faultScripts(t *testing.T) map[string]string {
	t.Helper()
	vm := hosts.Host{Address: "10.0.1.10", Redis: "10.0.1.10:6379", User: "admin", Type: hosts.VM}
	out := map[string]string{
		"heal":     hostfault.HealScript("0badcafe"),
		"heal all": hostfault.HealAllScript(vm),
		"restore":  hostfault.RestoreScript(),
	}
	for _, kind := range hostfault.Kinds() {
		for _, peers := range [][]string{nil, {"10.0.2.10"}} {
			p := fault.Params{fault.For: {D: 4 * time.Second}, "delay": {D: 3 * time.Second}, "add": {D: 20 * time.Millisecond}, "by": {D: 15 * time.Second}}
			s, err := hostfault.InjectScript(kind, "0badcafe", vm, p, peers, time.Minute)
			if err != nil {
				t.Fatalf("%s on a VM: %v", kind, err)
			}
			out[kind+" "+strings.Join(peers, ",")] = s
		}
	}
	var names []string
	for _, w := range hostfault.Weakenings {
		names = append(names, w.Name)
	}
	s, err := hostfault.WeakenScript(names...)
	if err != nil {
		t.Fatal(err)
	}
	out["weaken"] = s
	return out
}

// userDataPackages returns the packages: list of rendered user data.
func userDataPackages(t *testing.T, cloudInit string) []string {
	t.Helper()
	var doc struct {
		Packages []string `yaml:"packages"`
	}
	if err := yaml.Unmarshal([]byte(cloudInit), &doc); err != nil {
		t.Fatalf("decode user data: %v", err)
	}
	return doc.Packages
}

// uncovered returns, for each program neither installed by one of the
// packages nor part of the base system, why.
func uncovered(programs []string, packages []string) []string {
	var out []string
	for _, prog := range programs {
		pkg, ok := programPackage[prog]
		switch {
		case !ok:
			out = append(out, prog+": no package known for it (add it to programPackage)")
		case basePackages[pkg] != "" || slices.Contains(packages, pkg) || slices.Contains(packages, installedWith[pkg]):
		default:
			out = append(out, prog+": its package "+pkg+" is neither in the user data's packages nor in Debian's base system")
		}
	}
	return out
}

// TestUserDataInstallsFaultPrograms renders a node's user data and checks
// that every program the faults over SSH run on a VM is installed by it or
// is part of Debian's base system, and that the lab's machines carry
// exactly the packages the user data installs, so that the machines lab
// misses a program when a VM would.
func TestUserDataInstallsFaultPrograms(t *testing.T) {
	seen := map[string]bool{}
	for name, s := range faultScripts(t) {
		progs, err := shellCommands(s)
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, s)
		}
		for _, p := range progs {
			seen[p] = true
		}
	}
	programs := slices.Sorted(func(yield func(string) bool) {
		for p := range seen {
			if !yield(p) {
				return
			}
		}
	})
	// The scripts' own checks name what they need; the parse must see it.
	for _, want := range []string{"iptables", "tc", "python3", "systemd-run", "ip", "awk"} {
		if !seen[want] {
			t.Errorf("programs found %q: want %s among them (the parse missed a command)", programs, want)
		}
	}
	t.Logf("programs the faults over SSH run: %s", strings.Join(programs, ", "))

	deployed, _ := renderNodeFiles(t)
	pkgs := userDataPackages(t, deployed.CloudInit)
	for _, why := range uncovered(programs, pkgs) {
		t.Errorf("user data packages %s: %s", strings.Join(pkgs, ", "), why)
	}
	// The check would catch the user data forgetting iptables.
	without := slices.DeleteFunc(slices.Clone(pkgs), func(p string) bool { return p == "iptables" })
	if got := uncovered(programs, without); len(got) == 0 || !strings.HasPrefix(got[0], "iptables:") {
		t.Errorf("without iptables in the user data: got %q, want iptables uncovered", got)
	}

	img := machine.UserDataPackages()
	if a, b := slices.Sorted(slices.Values(img)), slices.Sorted(slices.Values(pkgs)); !slices.Equal(a, b) {
		t.Errorf("the machines' image carries %s for the user data, which installs %s: want the same packages",
			strings.Join(a, ", "), strings.Join(b, ", "))
	}
	checkPackageTable(t, programs)
}

// checkPackageTable checks programPackage and basePackages against the
// Debian host the test runs on, where it has the program or the package.
func checkPackageTable(t *testing.T, programs []string) {
	t.Helper()
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		t.Logf("no dpkg-query: the program table is not checked against a Debian host")
		return
	}
	for _, prog := range programs {
		path := installedPath(prog)
		if path == "" {
			continue
		}
		pkg := dpkgOwner(path)
		if pkg == "" {
			continue // installed outside dpkg (a pyenv python3, a local build)
		}
		if want := programPackage[prog]; pkg != want {
			t.Errorf("%s (%s) is in package %s on this host; programPackage says %s", prog, path, pkg, want)
		}
	}
	for pkg, want := range basePackages {
		out, err := exec.Command("dpkg-query", "-W", "-f=${Priority}", pkg).Output()
		if err != nil {
			continue // not installed here
		}
		if got := strings.TrimSpace(string(out)); got != want {
			t.Errorf("package %s has priority %q on this host; basePackages says %q", pkg, got, want)
		}
	}
}

// installedPath returns where a Debian package put prog, or "".
func installedPath(prog string) string {
	for _, dir := range []string{"/usr/bin", "/usr/sbin", "/bin", "/sbin"} {
		p := filepath.Join(dir, prog)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// dpkgOwner returns the package that owns path, trying the path with and
// without the /usr prefix (a merged /usr registers either), then what a
// symlink no package owns points to (an alternative: awk).
func dpkgOwner(path string) string {
	alt := strings.TrimPrefix(path, "/usr")
	if alt == path {
		alt = "/usr" + path
	}
	candidates := []string{path, alt}
	if r, err := filepath.EvalSymlinks(path); err == nil && r != path {
		candidates = append(candidates, r)
	}
	for _, p := range candidates {
		out, err := exec.Command("dpkg-query", "-S", p).Output()
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(out)) {
			// "dash: /usr/bin/sh"; "diversion by dash from: ..." lines are not owners.
			if pkg, _, ok := strings.Cut(line, ": "); ok && !strings.Contains(pkg, " ") {
				return pkg
			}
		}
	}
	return ""
}

// shellBuiltins are the POSIX shell's builtins and keywords as the command
// word; they run no program.
var shellBuiltins = map[string]bool{
	"[": true, "test": true, "echo": true, "printf": true, "exit": true, "set": true, "command": true,
	"cd": true, "true": true, "false": true, "read": true, "export": true, "local": true, "return": true,
	"shift": true, "trap": true, "eval": true, ".": true, ":": true, "wait": true, "kill": true,
	"break": true, "continue": true, "umask": true,
}

// heredocStart matches a here-document's operator and delimiter.
var heredocStart = regexp.MustCompile(`<<-?\s*'?([A-Za-z_][A-Za-z0-9_]*)'?`)

// shellCommands returns the programs a POSIX shell script runs: the
// command word of every simple command, in every branch, in command
// substitutions and in the here-documents written to a *.heal file (shell
// the host runs later). Other here-documents are data. Builtins, keywords
// and the script's own functions are left out; a path is reduced to its
// last element.
func shellCommands(script string) ([]string, error) {
	var shell strings.Builder
	lines := strings.Split(script, "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		m := heredocStart.FindStringSubmatchIndex(line)
		if m == nil {
			shell.WriteString(line + "\n")
			continue
		}
		delim := line[m[2]:m[3]]
		target := ""
		if f := strings.Fields(line[:m[0]]); len(f) > 0 {
			target = strings.Trim(f[len(f)-1], `'"`)
		}
		shell.WriteString(line[:m[0]] + line[m[1]:] + "\n")
		var body []string
		for i++; i < len(lines) && lines[i] != delim; i++ {
			body = append(body, lines[i])
		}
		if strings.HasSuffix(target, ".heal") {
			shell.WriteString(strings.Join(body, "\n") + "\n")
		}
	}
	toks, err := lexShell(shell.String())
	if err != nil {
		return nil, err
	}
	var cmds []string
	for _, list := range toks {
		cmds = append(cmds, commandWords(list)...)
	}
	funcs := map[string]bool{}
	for _, list := range toks {
		for i := 0; i+2 < len(list); i++ {
			if list[i].word && list[i+1].text == "(" && list[i+2].text == ")" {
				funcs[list[i].text] = true
			}
		}
	}
	var out []string
	for _, c := range cmds {
		if !funcs[c] && !shellBuiltins[c] {
			out = append(out, filepath.Base(c))
		}
	}
	return out, nil
}

// token is a word or an operator of the shell.
type token struct {
	text string
	word bool
}

// lexShell splits a script into tokens; each command substitution becomes
// a token list of its own, after the list it appears in.
func lexShell(s string) ([][]token, error) {
	l := &shellLexer{s: s}
	list, err := l.list(false)
	if err != nil {
		return nil, err
	}
	return append([][]token{list}, l.subs...), nil
}

type shellLexer struct {
	s    string
	i    int
	subs [][]token
}

// list lexes until the end, or until the ")" that closes a command
// substitution when inSub.
func (l *shellLexer) list(inSub bool) ([]token, error) {
	var toks []token
	depth := 0 // parentheses opened inside this list
	for l.i < len(l.s) {
		c := l.s[l.i]
		switch {
		case c == ' ' || c == '\t':
			l.i++
		case c == '\n' || c == ';' || c == '&' || c == '|':
			j := l.i + 1
			for j < len(l.s) && j < l.i+2 && (l.s[j] == c && c != '\n') {
				j++
			}
			toks = append(toks, token{text: l.s[l.i:j]})
			l.i = j
		case c == '(':
			depth++
			toks = append(toks, token{text: "("})
			l.i++
		case c == ')':
			if depth == 0 && inSub {
				l.i++
				return toks, nil
			}
			depth--
			toks = append(toks, token{text: ")"})
			l.i++
		case c == '#':
			for l.i < len(l.s) && l.s[l.i] != '\n' {
				l.i++
			}
		case c == '<' || c == '>' || (c >= '0' && c <= '9' && l.redirectAhead()):
			j := l.i
			for j < len(l.s) && l.s[j] >= '0' && l.s[j] <= '9' {
				j++
			}
			for j < len(l.s) && (l.s[j] == '<' || l.s[j] == '>' || l.s[j] == '&') {
				j++
			}
			toks = append(toks, token{text: "redirect"})
			l.i = j
		default:
			w, err := l.word()
			if err != nil {
				return nil, err
			}
			toks = append(toks, token{text: w, word: true})
		}
	}
	if inSub {
		return nil, errUnclosed("$(")
	}
	return toks, nil
}

// redirectAhead reports whether digits at l.i are a file descriptor of a
// redirection (2>/dev/null).
func (l *shellLexer) redirectAhead() bool {
	j := l.i
	for j < len(l.s) && l.s[j] >= '0' && l.s[j] <= '9' {
		j++
	}
	return j < len(l.s) && (l.s[j] == '>' || l.s[j] == '<')
}

// word lexes one word with its quotes; command substitutions in it are
// lexed into l.subs and stand as "$()" in the word.
func (l *shellLexer) word() (string, error) {
	var b strings.Builder
	for l.i < len(l.s) {
		c := l.s[l.i]
		switch {
		case strings.IndexByte(" \t\n;&|()<>", c) >= 0:
			return b.String(), nil
		case c == '\\':
			if l.i+1 < len(l.s) {
				b.WriteByte(l.s[l.i+1])
			}
			l.i += 2
		case c == '\'':
			end := strings.IndexByte(l.s[l.i+1:], '\'')
			if end < 0 {
				return "", errUnclosed("'")
			}
			b.WriteString(l.s[l.i+1 : l.i+1+end])
			l.i += end + 2
		case c == '"':
			l.i++
			if err := l.doubleQuoted(&b); err != nil {
				return "", err
			}
		case c == '$' && l.i+1 < len(l.s) && l.s[l.i+1] == '(':
			l.i += 2
			if err := l.substitution(); err != nil {
				return "", err
			}
			b.WriteString("$()")
		default:
			b.WriteByte(c)
			l.i++
		}
	}
	return b.String(), nil
}

// doubleQuoted lexes up to the closing quote.
func (l *shellLexer) doubleQuoted(b *strings.Builder) error {
	for l.i < len(l.s) {
		c := l.s[l.i]
		switch {
		case c == '"':
			l.i++
			return nil
		case c == '\\':
			if l.i+1 < len(l.s) {
				b.WriteByte(l.s[l.i+1])
			}
			l.i += 2
		case c == '$' && l.i+1 < len(l.s) && l.s[l.i+1] == '(':
			l.i += 2
			if err := l.substitution(); err != nil {
				return err
			}
			b.WriteString("$()")
		default:
			b.WriteByte(c)
			l.i++
		}
	}
	return errUnclosed(`"`)
}

func (l *shellLexer) substitution() error {
	sub, err := l.list(true)
	if err != nil {
		return err
	}
	l.subs = append(l.subs, sub)
	return nil
}

type errUnclosed string

func (e errUnclosed) Error() string { return "verify: shell: unclosed " + string(e) }

// assignment matches a variable assignment before a command.
var assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// commandWords returns the command word of every simple command in a token
// list: the first word after a separator or a keyword that starts a
// command, that is no assignment and no redirection's target.
func commandWords(toks []token) []string {
	var out []string
	start, skip := true, false
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		if !t.word {
			switch t.text {
			case "redirect":
				i++ // its target
			case ")":
			default: // separators and "("
				start, skip = true, false
			}
			continue
		}
		if !start || skip {
			continue
		}
		switch {
		case slices.Contains([]string{"if", "then", "else", "elif", "do", "while", "until", "!", "{", "exec"}, t.text):
			// the next word is a command
		case slices.Contains([]string{"fi", "done", "}"}, t.text):
		case t.text == "for" || t.text == "case":
			skip = true
		case assignment.MatchString(t.text):
			// an assignment before the command
		default:
			out = append(out, t.text)
			start = false
		}
	}
	return out
}

// TestShellCommands checks the parse on the shapes the fault scripts use.
func TestShellCommands(t *testing.T) {
	for _, tc := range []struct {
		script string
		want   []string
	}{
		{"set -eu\niptables -N \"$CHAIN\" && tc qdisc show 2>/dev/null | awk '{print $5; exit}'", []string{"iptables", "tc", "awk"}},
		{`IF=$(ip -o route show default | awk '{print $5}')` + "\n[ -n \"$IF\" ] || { echo no >&2; exit 3; }", []string{"ip", "awk"}},
		{`for c in $(iptables -S | grep x); do echo "healed: $(basename "$c" .heal)"; done`, []string{"iptables", "grep", "basename"}},
		{"has() { [ \"$(systemctl show -p X)\" = y ]; }\nif has u && ! systemctl is-active --quiet u; then /bin/sh /run/x.heal; fi", []string{"systemctl", "systemctl", "sh"}},
		{"cat > /run/a.heal <<'E'\nrm -f \"$0\"\nE\ncat > '/run/helper' <<'E'\nimport os\nE\npython3 /run/helper 0 # a comment: iptables\n", []string{"cat", "rm", "cat", "python3"}},
	} {
		got, err := shellCommands(tc.script)
		if err != nil {
			t.Fatalf("%q: %v", tc.script, err)
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(tc.want))
		if !slices.Equal(got, want) {
			t.Errorf("%q: got %q, want %q", tc.script, got, want)
		}
	}
	if _, err := shellCommands("echo 'unclosed"); err == nil {
		t.Error("an unclosed quote parsed")
	}
}

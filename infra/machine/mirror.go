package machine

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// HostMirror is the Debian archive the host's APT installs from, read from
// root's etc/apt/sources.list.d/*.sources (deb822) and etc/apt/sources.list
// (one-line style): the URI of the first "deb" entry whose suites are not
// only security or update suites (those live in archives of their own).
func HostMirror(root string) (string, error) {
	dir := filepath.Join(root, "etc/apt/sources.list.d")
	names, _ := filepath.Glob(filepath.Join(dir, "*.sources"))
	slices.Sort(names)
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			return "", fmt.Errorf("machine: %w", err)
		}
		if uri := mirrorIn822(b); uri != "" {
			return uri, nil
		}
	}
	lists, _ := filepath.Glob(filepath.Join(dir, "*.list"))
	slices.Sort(lists)
	for _, name := range append([]string{filepath.Join(root, "etc/apt/sources.list")}, lists...) {
		b, err := os.ReadFile(name)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("machine: %w", err)
		}
		if uri := mirrorInList(b); uri != "" {
			return uri, nil
		}
	}
	return "", errors.New("machine: no Debian archive in this host's APT sources (etc/apt/sources.list*): set $REDLAB_DEBIAN_MIRROR to one")
}

// mainSuites reports whether suites hold one that is not a security or
// update suite ("bookworm", not "bookworm-security" or "bookworm-updates").
func mainSuites(suites []string) bool {
	for _, s := range suites {
		if !strings.HasSuffix(s, "-security") && !strings.HasSuffix(s, "-updates") && !strings.HasSuffix(s, "/updates") {
			return true
		}
	}
	return false
}

// mirrorIn822 reads deb822 stanzas (blank-line separated "Field: value").
func mirrorIn822(b []byte) string {
	for _, stanza := range bytes.Split(b, []byte("\n\n")) {
		fields := map[string]string{}
		sc := bufio.NewScanner(bytes.NewReader(stanza))
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "#") {
				continue
			}
			if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(k, " ") {
				fields[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
			}
		}
		if fields["enabled"] == "no" || !slices.Contains(strings.Fields(fields["types"]), "deb") {
			continue
		}
		uris := strings.Fields(fields["uris"])
		if len(uris) > 0 && mainSuites(strings.Fields(fields["suites"])) {
			return uris[0]
		}
	}
	return ""
}

// mirrorInList reads one-line entries: deb [options] URI SUITE COMPONENT...
func mirrorInList(b []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || f[0] != "deb" {
			continue
		}
		f = f[1:]
		if strings.HasPrefix(f[0], "[") { // [arch=amd64 signed-by=...]
			for len(f) > 0 && !strings.HasSuffix(f[0], "]") {
				f = f[1:]
			}
			if len(f) == 0 {
				continue
			}
			f = f[1:]
		}
		if len(f) >= 2 && mainSuites(f[1:2]) {
			return f[0]
		}
	}
	return ""
}

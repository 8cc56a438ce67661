package machine

import (
	"os"
	"path/filepath"
	"testing"
)

func TestHostMirror(t *testing.T) {
	write := func(root, name, text string) {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string // "" wants an error
	}{
		{"deb822, security first", map[string]string{
			"etc/apt/sources.list.d/debian.sources": "Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\n\n" +
				"# a comment\nTypes: deb deb-src\nURIs: http://archive.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n",
		}, "http://archive.example/debian"},
		{"deb822, disabled stanza skipped", map[string]string{
			"etc/apt/sources.list.d/a.sources": "Enabled: no\nTypes: deb\nURIs: http://off.example/debian\nSuites: bookworm\n\nTypes: deb\nURIs: http://on.example/debian\nSuites: bookworm\n",
		}, "http://on.example/debian"},
		{"one-line style with options", map[string]string{
			"etc/apt/sources.list": "# deb http://old.example/debian bookworm main\ndeb-src http://src.example/debian bookworm main\n" +
				"deb [arch=amd64 signed-by=/k.gpg] http://list.example/debian bookworm main\n",
		}, "http://list.example/debian"},
		{"only security", map[string]string{
			"etc/apt/sources.list": "deb http://security.example/debian-security bookworm-security main\n",
		}, ""},
		{"nothing", map[string]string{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for name, text := range tc.files {
				write(root, name, text)
			}
			got, err := HostMirror(root)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("HostMirror = %q, want an error", got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("HostMirror = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

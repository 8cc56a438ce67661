package redlocklab_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/redlocklab/redlocklab/internal/testenv"
)

// libraryModule is the Redlock library's module path.
const libraryModule = "github.com/redlocklab/redlocklab/redlock"

// heavyModules are parts of module paths that belong to the lab's graph
// and must never reach a service that imports only the library: etcd,
// Prometheus, FUSE, the databases, HCL and Terraform.
var heavyModules = []string{"etcd", "prometheus", "go-fuse", "pgx", "sqlite", "hcl", "terraform"}

// consumerMain is a service that takes a lock with the library.
const consumerMain = `package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/redlocklab/redlocklab/redlock"
)

func main() {
	locker, err := redlock.New(redlock.NewNodes(os.Args[1:]))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer locker.Close()
	err = locker.Do(context.Background(), "consumer", 10*time.Second, func(context.Context) error { return nil })
	fmt.Println(err)
}
`

// TestLibraryModuleStandsAlone builds a small consumer module in a
// directory outside the repository against the library's module alone (a
// replace to this checkout's redlock/, the rest from the module proxy as
// the environment names it), with the go version the library's go.mod
// names, and checks what a service that imports the library gets: a
// module graph with none of the lab's heavy modules, and only what go-redis
// requires besides go-redis and the library. The library's go line must be
// the oldest its dependencies allow, and the build must also succeed with
// exactly that Go release (GOTOOLCHAIN, from the module proxy).
func TestLibraryModuleStandsAlone(t *testing.T) {
	goBin := testenv.Require(t, "go")
	lib := filepath.Join(testenv.RepoRoot(t), "redlock")
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	local := append(slices.Clone(env), "GOTOOLCHAIN=local")
	run := func(dir string, env []string, args ...string) string {
		t.Helper()
		cmd := exec.Command(goBin, args...)
		cmd.Dir, cmd.Env = dir, env
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, stderr.String())
		}
		return string(out)
	}

	var mod struct {
		Module  struct{ Path string }
		Go      string
		Require []struct{ Path string }
	}
	if err := json.Unmarshal([]byte(run(lib, local, "mod", "edit", "-json")), &mod); err != nil {
		t.Fatalf("go mod edit -json of %s: %v", lib, err)
	}
	if mod.Module.Path != libraryModule {
		t.Fatalf("%s/go.mod: got module %s, want %s", lib, mod.Module.Path, libraryModule)
	}

	// What go-redis needs: every module its go.mod leads to in the
	// library's module graph. The library requires go-redis and nothing
	// else.
	edges := map[string][]string{}
	var redis string // go-redis@version
	for line := range strings.Lines(run(lib, local, "mod", "graph")) {
		from, to, _ := strings.Cut(strings.TrimSpace(line), " ")
		edges[from] = append(edges[from], to)
		if strings.HasPrefix(to, "github.com/redis/go-redis/v9@") && from == libraryModule {
			redis = to
		}
	}
	if redis == "" {
		t.Fatalf("%s/go.mod does not require go-redis", lib)
	}
	redisDeps := map[string]bool{}
	for todo := []string{redis}; len(todo) > 0; {
		m := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if path, _, _ := strings.Cut(m, "@"); !redisDeps[path] {
			redisDeps[path] = true
			todo = append(todo, edges[m]...)
		}
	}
	for _, r := range mod.Require {
		if !redisDeps[r.Path] {
			t.Errorf("%s/go.mod requires %s, which %s does not lead to: the library must require go-redis alone", lib, r.Path, redis)
		}
	}

	dir := t.TempDir()
	if rel, err := filepath.Rel(filepath.Dir(lib), dir); err == nil && !strings.HasPrefix(rel, "..") {
		t.Fatalf("consumer directory %s is inside the repository", dir)
	}
	goMod := "module example.com/lockconsumer\n\ngo " + mod.Go + "\n\nrequire " + libraryModule +
		" v0.0.0-00010101000000-000000000000\n\nreplace " + libraryModule + " => " + lib + "\n"
	for name, body := range map[string]string{"go.mod": goMod, "main.go": consumerMain} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run(dir, local, "mod", "tidy")
	run(dir, local, "build", "-o", filepath.Join(dir, "consumer"), ".")

	// Tidy raises the go line to the newest any dependency names, so an
	// unchanged line means the library's is high enough; equal to the
	// newest of its dependencies means it is no higher than they need.
	type module struct {
		Path      string
		GoVersion string
		Main      bool
	}
	var graph []module
	dec := json.NewDecoder(strings.NewReader(run(dir, local, "list", "-m", "-json", "all")))
	for dec.More() {
		var m module
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("go list -m -json all: %v", err)
		}
		graph = append(graph, m)
	}
	var consumer struct{ Go string }
	if err := json.Unmarshal([]byte(run(dir, local, "mod", "edit", "-json")), &consumer); err != nil {
		t.Fatal(err)
	}
	if consumer.Go != mod.Go {
		t.Errorf("consumer's go line after tidy: got %s, want the library's %s (a dependency needs a newer Go than the library's go.mod names)", consumer.Go, mod.Go)
	}
	newest, newestPath := "", ""
	var paths []string
	for _, m := range graph {
		paths = append(paths, m.Path)
		if !m.Main && m.Path != libraryModule && goNewer(m.GoVersion, newest) {
			newest, newestPath = m.GoVersion, m.Path
		}
	}
	if mod.Go != newest {
		t.Errorf("library's go line: got %s, want %s, the newest its dependencies name (%s): the oldest Go the library can have, unless its own code needs newer (then say so here)", mod.Go, newest, newestPath)
	}
	t.Logf("consumer's module graph (go list -m all):\n%s", strings.Join(paths, "\n"))

	// Nothing of the lab's graph, and nothing go-redis does not bring.
	for _, p := range paths {
		for _, heavy := range heavyModules {
			if strings.Contains(p, heavy) {
				t.Errorf("consumer's module graph holds %s (%s): a service that imports the library must not get the lab's modules", p, heavy)
			}
		}
		if p != "example.com/lockconsumer" && p != libraryModule && !redisDeps[p] {
			t.Errorf("consumer's module graph holds %s, which neither the library nor %s leads to", p, redis)
		}
	}

	// The same build on exactly the Go release the go line names.
	pinned := append(slices.Clone(env), "GOTOOLCHAIN=go"+mod.Go)
	if v := run(dir, pinned, "version"); !strings.Contains(v, "go"+mod.Go+" ") {
		t.Fatalf("GOTOOLCHAIN=go%s go version: got %q", mod.Go, v)
	}
	run(dir, pinned, "build", "-o", filepath.Join(dir, "consumer-go"+mod.Go), ".")
}

// goNewer reports whether Go version a is newer than b ("" is oldest).
// Versions are go.mod go lines: 1.N or 1.N.P.
func goNewer(a, b string) bool {
	num := func(v string) [3]int {
		var n [3]int
		for i, part := range strings.SplitN(v, ".", 3) {
			for _, c := range part {
				if c < '0' || c > '9' {
					break
				}
				n[i] = n[i]*10 + int(c-'0')
			}
		}
		return n
	}
	x, y := num(a), num(b)
	return slices.Compare(x[:], y[:]) > 0
}

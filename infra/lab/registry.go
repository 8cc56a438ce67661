package lab

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/internal/atomicfile"
	"github.com/redlocklab/redlocklab/internal/proc"
)

// The registry makes the labs on a machine findable (`redlab lab list`,
// `lab down --all`), wherever their state directories are: Up writes one
// small file per lab into the registry directory, naming its state
// directory, and Down removes it. An entry whose state directory holds no
// lab any more (removed by hand, a reboot's tmp cleaning) is reported and
// removed by List.

// RegistryEnv, when set, is the registry directory (tests, or several
// isolated sets of labs on one machine).
const RegistryEnv = "REDLAB_LAB_REGISTRY"

// RegistryDir is the registry directory: $REDLAB_LAB_REGISTRY, else
// /run/redlab/labs for root, else $XDG_RUNTIME_DIR/redlab/labs, else
// redlab-UID/labs in os.TempDir().
func RegistryDir() string {
	if d := os.Getenv(RegistryEnv); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/run/redlab/labs"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "redlab", "labs")
	}
	return filepath.Join(os.TempDir(), "redlab-"+strconv.Itoa(os.Geteuid()), "labs")
}

// registryEntry is one registry file.
type registryEntry struct {
	StateDir string `json:"state_dir"`
}

// entryPath is the registry file of the lab in stateDir (absolute).
func entryPath(stateDir string) string {
	sum := sha256.Sum256([]byte(stateDir))
	return filepath.Join(RegistryDir(), hex.EncodeToString(sum[:8])+".json")
}

func register(stateDir string) error {
	if err := os.MkdirAll(RegistryDir(), 0o755); err != nil {
		return fmt.Errorf("lab: registry: %w", err)
	}
	if err := atomicfile.WriteJSON(entryPath(stateDir), registryEntry{StateDir: stateDir}, 0o644); err != nil {
		return fmt.Errorf("lab: registry: %w", err)
	}
	return nil
}

func unregister(stateDir string) { _ = os.Remove(entryPath(stateDir)) }

// Listed is one lab of the registry, as List found it.
type Listed struct {
	StateDir string `json:"state_dir"`
	Nodes    int    `json:"nodes"`
	Etcd     int    `json:"etcd,omitempty"`
	// Running is how many of its supervisors (nodes and etcd members) run.
	Running int `json:"running"`
	// Owner is the lab's owner (nil: none, the lab stays until a down);
	// OwnerAlive whether it still runs. A lab whose owner is gone is an
	// orphan: its supervisors take it down, and `lab down --all` does it
	// for one whose supervisors are gone too.
	Owner      *Owner `json:"owner,omitempty"`
	OwnerAlive bool   `json:"owner_alive"`
	Orphan     bool   `json:"orphan"`
}

// State is "up" (every supervisor runs), "down" (none does) or "partial".
func (l Listed) State() string {
	switch total := l.Nodes + l.Etcd; {
	case l.Running == total && total > 0:
		return "up"
	case l.Running == 0:
		return "down"
	}
	return "partial"
}

// List returns the registered labs, sorted by state directory. Entries that
// name no lab are removed; each is one of problems, which never stop the
// listing.
func List() (labs []Listed, problems []error) {
	dir := RegistryDir()
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, []error{fmt.Errorf("lab: registry %s: %w", dir, err)}
	}
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		var ent registryEntry
		b, err := os.ReadFile(p)
		if err == nil {
			err = json.Unmarshal(b, &ent)
		}
		if err == nil && !filepath.IsAbs(ent.StateDir) {
			err = fmt.Errorf("state dir %q is not absolute", ent.StateDir)
		}
		if err != nil {
			problems = append(problems, fmt.Errorf("lab: registry entry %s is unreadable (%v): removed", p, err))
			_ = os.Remove(p)
			continue
		}
		l, err := Open(ent.StateDir)
		if err != nil {
			problems = append(problems, fmt.Errorf("lab: registry entry %s names %s, which holds no lab (%v): removed", p, ent.StateDir, err))
			_ = os.Remove(p)
			continue
		}
		labs = append(labs, l.listed())
	}
	sort.Slice(labs, func(i, j int) bool { return labs[i].StateDir < labs[j].StateDir })
	return labs, problems
}

// listed is what List says of l.
func (l *Lab) listed() Listed {
	out := Listed{StateDir: l.stateDir, Nodes: len(l.f.Endpoints), Etcd: len(l.f.EtcdMembers), Owner: l.Owner()}
	if out.Nodes == 0 {
		out.Nodes = l.f.Nodes // an apply that never finished
	}
	for _, n := range l.f.Endpoints {
		if pid := node.LastStatus(l.stateDir, n.ID).SupervisorPID; pid > 0 && proc.Alive(pid) {
			out.Running++
		}
	}
	for _, m := range l.f.EtcdMembers {
		if pid := node.LastEtcdStatus(l.stateDir, m.ID).SupervisorPID; pid > 0 && proc.Alive(pid) {
			out.Running++
		}
	}
	if out.Owner != nil {
		out.OwnerAlive = out.Owner.Alive()
		out.Orphan = !out.OwnerAlive
	}
	return out
}

// Owner is the lab's owner, nil when it has none (Config.Owner).
func (l *Lab) Owner() *Owner {
	if l.f.Owner == nil {
		return nil
	}
	o := *l.f.Owner
	return &o
}

// DownAll takes down every registered lab whose owner is gone (orphans),
// or with force every registered lab, as Down would (cfg gives Terraform
// and Log). It returns the state directories it took down, List's
// problems (registry entries it cleaned, not failures), and the failed
// downs, joined.
func DownAll(ctx context.Context, cfg Config, force bool) (down []string, problems []error, err error) {
	labs, problems := List()
	var errs []error
	for _, l := range labs {
		if !force && !l.Orphan {
			continue
		}
		c := cfg
		c.StateDir = l.StateDir
		if err := Down(ctx, c); err != nil {
			errs = append(errs, fmt.Errorf("lab: down %s: %w", l.StateDir, err))
			continue
		}
		down = append(down, l.StateDir)
	}
	return down, problems, errors.Join(errs...)
}

package lab

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/redlocklab/redlocklab/internal/redistest"
	"github.com/redlocklab/redlocklab/internal/testenv"
	"github.com/redlocklab/redlocklab/internal/tlscert"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

// TestEnsureTLS: a TLS lab's files are written once and kept, the key
// private to its owner.
func TestEnsureTLS(t *testing.T) {
	dir := t.TempDir()
	if err := ensureTLS(dir); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(dir, TLSDir, tlscert.CAFile)
	first, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(dir, TLSDir, tlscert.KeyFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("node key: %v, %v; want mode 0600", st.Mode(), err)
	}
	if err := ensureTLS(dir); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(ca); string(again) != string(first) {
		t.Error("a second ensureTLS replaced the CA: running nodes would no longer verify")
	}
}

// TestExporterTLS runs the real redis_exporter with the lab's command line
// against a real TLS-only redis-server: with the lab's CA it scrapes the
// node (redis_up 1); with another CA it reports the node down.
func TestExporterTLS(t *testing.T) {
	bin := testenv.Require(t, "prometheus-redis-exporter")
	now := time.Now()
	newCA := func(name string) (*tlscert.CA, string) {
		ca, err := tlscert.NewCA(name, now.Add(-time.Hour), now.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "ca.crt")
		if err := os.WriteFile(path, ca.PEM, 0o644); err != nil {
			t.Fatal(err)
		}
		return ca, path
	}
	ca, caFile := newCA("lab CA")
	_, otherFile := newCA("other CA")
	node := redistest.StartTLS(t, ca, tlscert.LabHosts, now.Add(-time.Hour), now.Add(time.Hour))
	pw := filepath.Join(t.TempDir(), "passwords.json")
	if err := os.WriteFile(pw, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]float64{caFile: 1, otherFile: 0} {
		addr := fmt.Sprintf("127.0.0.1:%d", redlocktest.FreePort(t))
		cmd := exec.Command(bin, ExporterArgs(node.Addr, "", pw, addr, time.Second, file)...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
		deadline := time.Now().Add(20 * time.Second)
		for {
			resp, err := http.Get("http://" + addr + "/metrics")
			if err == nil {
				parser := expfmt.NewTextParser(model.UTF8Validation)
				mfs, perr := parser.TextToMetricFamilies(resp.Body)
				resp.Body.Close()
				if perr != nil {
					t.Fatal(perr)
				}
				if up := mfs["redis_up"]; up != nil {
					if got := up.GetMetric()[0].GetGauge().GetValue(); got != want {
						t.Errorf("CA %s: redis_up %v, want %v", file, got, want)
					}
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("redis_exporter on %s: no redis_up within 20s (last error %v)", addr, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

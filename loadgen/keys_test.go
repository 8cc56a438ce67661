package loadgen

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

func counts(t *testing.T, spec string, shard Shard, draws int) ([]int, *KeyGen) {
	t.Helper()
	ks, err := ParseKeys(spec)
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewKeyGen(ks, shard)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	c := make([]int, g.Len())
	for i := 0; i < draws; i++ {
		k := g.Next(r)
		if k < 0 || k >= g.Len() {
			t.Fatalf("draw %d outside [0,%d)", k, g.Len())
		}
		c[k]++
	}
	return c, g
}

func zeta(n int, theta float64) float64 {
	z := 0.0
	for i := 1; i <= n; i++ {
		z += 1 / math.Pow(float64(i), theta)
	}
	return z
}

func TestZipfSkew(t *testing.T) {
	const draws = 400_000
	for _, theta := range []float64{0.5, 0.99, 1.2} {
		c, _ := counts(t, "zipf:1000:"+strconv.FormatFloat(theta, 'f', -1, 64), Shard{}, draws)
		z := zeta(1000, theta)
		// Ranks 0 and 1 are exact in both generators; check them within 5%.
		for r := 0; r < 2; r++ {
			want := 1 / math.Pow(float64(r+1), theta) / z
			got := float64(c[r]) / draws
			if math.Abs(got-want)/want > 0.05 {
				t.Errorf("θ=%v rank %d: got frequency %.4f, want %.4f", theta, r, got, want)
			}
		}
		// The head carries far more than its share: the top 1% of keys
		// against a uniform 1%.
		head := 0
		for _, n := range c[:10] {
			head += n
		}
		wantHead := 0.0
		for r := 1; r <= 10; r++ {
			wantHead += 1 / math.Pow(float64(r), theta) / z
		}
		if got := float64(head) / draws; math.Abs(got-wantHead)/wantHead > 0.1 {
			t.Errorf("θ=%v top-10 share: got %.3f, want %.3f", theta, got, wantHead)
		}
	}
}

func TestHotFraction(t *testing.T) {
	const draws = 200_000
	c, _ := counts(t, "hot:1000:0.8", Shard{}, draws)
	if got := float64(c[0]) / draws; math.Abs(got-0.8) > 0.01 {
		t.Errorf("hot key share: got %.3f, want 0.80 ± 0.01", got)
	}
	c, _ = counts(t, "hot:1000:0.5:10", Shard{}, draws)
	hot := 0
	for _, n := range c[:10] {
		hot += n
	}
	if got := float64(hot) / draws; math.Abs(got-0.5) > 0.01 {
		t.Errorf("10 hot keys' share: got %.3f, want 0.50 ± 0.01", got)
	}
}

func TestUniformAndShardedKeys(t *testing.T) {
	const draws = 100_000
	c, g := counts(t, "uniform:10", Shard{}, draws)
	for k, n := range c {
		if got := float64(n) / draws; math.Abs(got-0.1) > 0.01 {
			t.Errorf("key %d share %.3f, want 0.10 ± 0.01", k, got)
		}
	}
	if g.Name(3) != "sku-000003" {
		t.Errorf("Name(3) = %q", g.Name(3))
	}
	// Shard 1 of 3 over 10 keys owns 1, 4, 7.
	_, g = counts(t, "uniform:10", Shard{Index: 1, Count: 3}, 10)
	want := []string{"sku-000001", "sku-000004", "sku-000007"}
	if got := g.Names(); len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("shard 1/3 keys = %v, want %v", got, want)
	}
	ks, _ := ParseKeys("uniform:2")
	if _, err := NewKeyGen(ks, Shard{Index: 2, Count: 3}); err == nil {
		t.Error("shard with no keys: got nil error")
	}
}

func TestParseKeys(t *testing.T) {
	for _, tc := range []struct {
		in, canon string
		ok        bool
	}{
		{"uniform:100", "uniform:100", true},
		{"zipf:1000:0.99", "zipf:1000:0.99", true},
		{"zipf:1000:1.5", "zipf:1000:1.5", true},
		{"hot:100:0.9", "hot:100:0.9", true},
		{"hot:100:0.9:5", "hot:100:0.9:5", true},
		{"zipf:1000:1", "", false},
		{"zipf:1000:0", "", false},
		{"zipf:1000", "", false},
		{"uniform:0", "", false},
		{"uniform:x", "", false},
		{"hot:100:1.5", "", false},
		{"hot:5:0.5:5", "", false},
		{"gauss:10", "", false},
		{"100", "", false},
	} {
		ks, err := ParseKeys(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("ParseKeys(%q) error = %v, want ok=%v", tc.in, err, tc.ok)
			continue
		}
		if tc.ok && ks.String() != tc.canon {
			t.Errorf("ParseKeys(%q).String() = %q, want %q", tc.in, ks.String(), tc.canon)
		}
	}
}

func TestQuantity(t *testing.T) {
	for _, tc := range []struct {
		in       string
		min, max int64
		ok       bool
	}{
		{"1", 1, 1, true}, {"const:3", 3, 3, true}, {"uniform:1:5", 1, 5, true},
		{"0", 0, 0, false}, {"uniform:5:1", 0, 0, false}, {"zipf:1", 0, 0, false}, {"x", 0, 0, false},
	} {
		q, err := ParseQuantity(tc.in)
		if (err == nil) != tc.ok || (tc.ok && (q.Min != tc.min || q.Max != tc.max)) {
			t.Errorf("ParseQuantity(%q) = %+v, %v; want [%d,%d] ok=%v", tc.in, q, err, tc.min, tc.max, tc.ok)
		}
	}
	q, _ := ParseQuantity("uniform:2:4")
	r := rand.New(rand.NewPCG(3, 4))
	seen := map[int64]bool{}
	for i := 0; i < 1000; i++ {
		v := q.Next(r)
		if v < 2 || v > 4 {
			t.Fatalf("quantity %d outside [2,4]", v)
		}
		seen[v] = true
	}
	if len(seen) != 3 {
		t.Errorf("got values %v, want all of 2,3,4", seen)
	}
}

// TestHottestShare holds the spec's arithmetic to the generator's draws:
// the hottest key's frequency is what KeySpec.HottestShare says.
func TestHottestShare(t *testing.T) {
	const draws = 200_000
	for _, spec := range []string{"uniform:4", "uniform:1000", "hot:10:0.9", "hot:100:0.5:5", "hot:3:0.1", "zipf:1000:0.99", "zipf:50:1.5"} {
		t.Run(spec, func(t *testing.T) {
			c, _ := counts(t, spec, Shard{}, draws)
			most := 0
			for _, n := range c {
				most = max(most, n)
			}
			ks, _ := ParseKeys(spec)
			got, want := float64(most)/draws, ks.HottestShare()
			if math.Abs(got-want) > 0.01+want*0.05 {
				t.Errorf("hottest key's frequency %.4f, HottestShare %.4f", got, want)
			}
		})
	}
}

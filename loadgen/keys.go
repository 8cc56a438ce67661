package loadgen

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/redlocklab/redlocklab/loadgen/loadspec"
)

// KeySpec describes which SKU each operation reserves (package loadspec).
type KeySpec = loadspec.KeySpec

// ParseKeys parses a key distribution.
func ParseKeys(s string) (KeySpec, error) { return loadspec.ParseKeys(s) }

// KeyName is the SKU of key index i.
func KeyName(i int) string { return fmt.Sprintf("sku-%06d", i) }

// KeyGen draws key indices for one shard. It is not safe for concurrent use.
type KeyGen struct {
	shard Shard
	n     int // keys in this shard
	draw  func(r *rand.Rand) int
	names []string
}

// Generator builds the generator of shard's share of the keys: shard i of M
// owns the keys whose index is i modulo M and draws over them with the same
// distribution shape, so machines never seed or audit each other's SKUs.
func NewKeyGen(k KeySpec, shard Shard) (*KeyGen, error) {
	shard = shard.norm()
	n := (k.N - shard.Index + shard.Count - 1) / shard.Count
	if n < 1 {
		return nil, fmt.Errorf("loadgen: keys %s: worker %s has no keys; use more keys than workers", k, shard)
	}
	g := &KeyGen{shard: shard, n: n}
	switch k.Kind {
	case "uniform":
		g.draw = func(r *rand.Rand) int { return r.IntN(n) }
	case "zipf":
		if k.Theta < 1 {
			g.draw = newYCSBZipf(n, k.Theta)
		} else {
			g.draw = newRejectionZipf(n, k.Theta)
		}
	case "hot":
		hot := k.Hot * n / k.N // the hot keys scale with the shard
		if hot < 1 {
			hot = 1
		}
		if hot >= n && n > 1 {
			hot = n - 1
		}
		frac := k.Frac
		g.draw = func(r *rand.Rand) int {
			if n == 1 {
				return 0
			}
			if r.Float64() < frac {
				return r.IntN(hot)
			}
			return hot + r.IntN(n-hot)
		}
	default:
		return nil, fmt.Errorf("loadgen: unknown key distribution %q", k.Kind)
	}
	g.names = make([]string, n)
	for r := range g.names {
		g.names[r] = KeyName(g.Index(r))
	}
	return g, nil
}

// Prefix puts p in front of every SKU this generator names, so that runs
// sharing lock nodes and a store (the guards of a drill) never touch each
// other's keys. It returns g.
func (g *KeyGen) Prefix(p string) *KeyGen {
	for i, n := range g.names {
		g.names[i] = p + n
	}
	return g
}

// Len is the number of keys this shard uses.
func (g *KeyGen) Len() int { return g.n }

// Index maps a shard-local rank to the global key index.
func (g *KeyGen) Index(rank int) int { return rank*g.shard.Count + g.shard.Index }

// Next draws a shard-local rank; Name(rank) is its SKU.
func (g *KeyGen) Next(r *rand.Rand) int { return g.draw(r) }

// Name is the SKU of a shard-local rank.
func (g *KeyGen) Name(rank int) string { return g.names[rank] }

// Names lists every SKU this shard uses, hottest first.
func (g *KeyGen) Names() []string { return g.names }

// newYCSBZipf is YCSB's ZipfianGenerator (Gray et al., "Quickly generating
// billion-record synthetic databases", SIGMOD 1994): O(n) setup, O(1) draws,
// valid for 0 < θ < 1.
func newYCSBZipf(n int, theta float64) func(*rand.Rand) int {
	if n == 1 {
		return func(*rand.Rand) int { return 0 }
	}
	zetan := 0.0
	for i := 1; i <= n; i++ {
		zetan += 1 / math.Pow(float64(i), theta)
	}
	zeta2 := 1 + 1/math.Pow(2, theta)
	alpha := 1 / (1 - theta)
	eta := (1 - math.Pow(2/float64(n), 1-theta)) / (1 - zeta2/zetan)
	half := 1 + math.Pow(0.5, theta)
	fn := float64(n)
	return func(r *rand.Rand) int {
		u := r.Float64()
		uz := u * zetan
		if uz < 1 {
			return 0
		}
		if uz < half {
			return 1
		}
		v := int(fn * math.Pow(eta*u-eta+1, alpha))
		if v >= n {
			v = n - 1
		}
		return v
	}
}

// newRejectionZipf covers θ > 1 with math/rand/v2's Zipf (s = θ, v = 1).
func newRejectionZipf(n int, theta float64) func(*rand.Rand) int {
	if n == 1 {
		return func(*rand.Rand) int { return 0 }
	}
	var z *rand.Zipf
	var src *rand.Rand
	return func(r *rand.Rand) int {
		if z == nil || src != r {
			src = r
			z = rand.NewZipf(r, theta, 1, uint64(n-1))
		}
		return int(z.Uint64())
	}
}

// QuantitySpec is the distribution of units per reservation (package
// loadspec).
type QuantitySpec = loadspec.QuantitySpec

// ParseQuantity parses a quantity distribution.
func ParseQuantity(s string) (QuantitySpec, error) { return loadspec.ParseQuantity(s) }

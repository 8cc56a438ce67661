package loadgen

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"strconv"
	"strings"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// Every percentile, mean and spectrum loadgen reports is computed here, by
// the rules of the reference HdrHistogram (Java's AbstractHistogram, which
// HistogramLogProcessor uses and hdr-histogram-js follows), so that
// summary.json, thresholds, the status line, metrics, the charts and the
// .hgrm files agree with what those tools read from the same latency.hlog.
// hdrhistogram-go's ValueAtQuantile picks the value of rank round(p·N)
// rather than ceil(p·N), which reports a lower p99.9 whenever p·N has a
// fraction below one half, and its PercentilesPrint writes another layout.
// HdrHistogram_c rounds like hdrhistogram-go; the Java and JS tools are the
// ones people read .hlog files with.

// percentileRank is the 1-based rank of the value at percentile p (0–100)
// among n values, by Java's getValueAtPercentile: ceil(p·n/100), at least 1.
// p is first lowered by one ulp so that rounding noise in p·n cannot lift an
// exact rank (99.9 % of 41000 is 40959, where the product comes out a hair
// above).
func percentileRank(p float64, n int64) int64 {
	if math.IsNaN(p) {
		return 1
	}
	rp := min(max(math.Nextafter(p, math.Inf(-1)), 0), 100)
	return max(int64(math.Ceil(rp*float64(n)/100)), 1)
}

// atPercentiles returns the value at each percentile of ps (0–100) of h: the
// highest value equivalent to the bucket that holds the value of rank
// percentileRank, the lowest for p = 0, 0 when h is empty. The buckets are
// read once for all of ps.
func atPercentiles(h *hdr.Histogram, ps ...float64) []int64 {
	out := make([]int64, len(ps))
	n := h.TotalCount()
	if n == 0 {
		return out
	}
	bars := h.Distribution() // every bucket up to the highest recorded one
	for i, p := range ps {
		rank := percentileRank(p, n)
		var cum int64
		for _, b := range bars {
			if cum += b.Count; cum >= rank {
				out[i] = b.To
				if p == 0 {
					out[i] = b.From
				}
				break
			}
		}
	}
	return out
}

// atPercentile is atPercentiles for one percentile.
func atPercentile(h *hdr.Histogram, p float64) int64 { return atPercentiles(h, p)[0] }

// histStats returns the mean and the standard deviation of h as Java's
// getMean and getStdDeviation compute them: every recorded bucket counts at
// its median equivalent value, summed in bucket order and divided once.
// (hdrhistogram-go divides term by term, which can differ in the last bits
// and so in the last printed digit.)
func histStats(h *hdr.Histogram) (mean, stddev float64) {
	n := h.TotalCount()
	if n == 0 {
		return 0, 0
	}
	bars := h.Distribution()
	var total float64
	for _, b := range bars {
		if b.Count != 0 {
			total += float64(medianEquivalent(b)) * float64(b.Count)
		}
	}
	mean = total / float64(n)
	var dev float64
	for _, b := range bars {
		if b.Count != 0 {
			d := float64(medianEquivalent(b)) - mean
			dev += d * d * float64(b.Count)
		}
	}
	return mean, math.Sqrt(dev / float64(n))
}

// histMax is Java's getMaxValue: the highest value equivalent to the top
// recorded bucket, 0 when nothing was recorded (hdrhistogram-go's Max then
// gives the top of the first bucket).
func histMax(h *hdr.Histogram) int64 {
	if h.TotalCount() == 0 {
		return 0
	}
	return h.Max()
}

func medianEquivalent(b hdr.Bar) int64 { return b.From + (b.To-b.From+1)>>1 }

// percentileStep is one line of a percentile distribution.
type percentileStep struct {
	Value int64   // the highest value equivalent to the bucket reached
	Level float64 // the percentile level reported, 0–100
	Count int64   // values up to and including that bucket
}

// percentileDistribution walks h as Java's PercentileIterator does for
// outputPercentileDistribution: levels from 0 in ticksPerHalf equal steps
// per half of the remaining distance to 100 (0, 10, …, 50, 55, …, 75, 77.5,
// … for 5), each reported at the first recorded bucket whose cumulative
// share reaches it (a bucket may report several levels), then one last step
// at 100. Nil when h is empty.
func percentileDistribution(h *hdr.Histogram, ticksPerHalf int) []percentileStep {
	n := h.TotalCount()
	if n == 0 {
		return nil
	}
	bars := h.Distribution()
	var out []percentileStep
	level, cum := 0.0, int64(0)
	i, fresh := 0, true
	for cum < n {
		for ; i < len(bars); i, fresh = i+1, true {
			if fresh {
				cum += bars[i].Count
				fresh = false
			}
			if bars[i].Count != 0 && 100*float64(cum)/float64(n) >= level {
				break
			}
		}
		if i == len(bars) { // unreachable: the last bucket holds the 100th percentile
			return out
		}
		out = append(out, percentileStep{Value: bars[i].To, Level: level, Count: cum})
		// The tick count doubles each time the level crosses half of the
		// distance left to 100 %; Log2 is exact at those powers of two, as
		// Java's log(x)/log(2) is.
		halvings := int(math.Floor(math.Log2(100 / (100 - level))))
		level += 100 / float64(int64(ticksPerHalf)<<(halvings+1))
	}
	return append(out, percentileStep{Value: bars[i].To, Level: 100, Count: cum})
}

// hgrmTicksPerHalf is the resolution of the .hgrm files and the spectrum
// chart: HistogramLogProcessor's default.
const hgrmTicksPerHalf = 5

// writeHgrm writes h's percentile distribution to path: one comment line
// that names the unit of the values (HistogramLogProcessor's own .hgrm files
// open with # lines too, and every .hgrm reader skips them), then exactly
// what HdrHistogram's outputPercentileDistribution prints for h with the
// values divided by scale.
func writeHgrm(path string, h *hdr.Histogram, scale float64, unit string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("loadgen: %w", err)
	}
	bw := bufio.NewWriter(f)
	_, err = fmt.Fprintf(bw, "#[Values in %s]\n", unit)
	if err == nil {
		err = formatHgrm(bw, h, scale)
	}
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("loadgen: write %s: %w", path, err)
	}
	return nil
}

// formatHgrm is Java's outputPercentileDistribution(w, 5, scale): fixed
// columns, as many decimals for values as the histogram has significant
// digits, no 1/(1-Percentile) on the last line, and the Mean, Max and
// Buckets footer.
func formatHgrm(w io.Writer, h *hdr.Histogram, scale float64) error {
	sig := int(h.SignificantFigures())
	var b strings.Builder
	fmt.Fprintf(&b, "%12s %14s %10s %14s\n\n", "Value", "Percentile", "TotalCount", "1/(1-Percentile)")
	for _, s := range percentileDistribution(h, hgrmTicksPerHalf) {
		p := s.Level / 100
		fmt.Fprintf(&b, "%12s %2s %10d", formatFixed(float64(s.Value)/scale, sig), formatFixed(p, 12), s.Count)
		if s.Level != 100 {
			fmt.Fprintf(&b, " %14s", formatFixed(1/(1-p), 2))
		}
		b.WriteByte('\n')
	}
	mean, stddev := histStats(h)
	buckets, subBuckets := bucketGeometry(h)
	fmt.Fprintf(&b, "#[Mean    = %12s, StdDeviation   = %12s]\n", formatFixed(mean/scale, sig), formatFixed(stddev/scale, sig))
	fmt.Fprintf(&b, "#[Max     = %12s, Total count    = %12d]\n", formatFixed(float64(histMax(h))/scale, sig), h.TotalCount())
	fmt.Fprintf(&b, "#[Buckets = %12d, SubBuckets     = %12d]\n", buckets, subBuckets)
	_, err := io.WriteString(w, b.String())
	return err
}

// bucketGeometry returns the bucket and sub-bucket counts that HdrHistogram
// derives from h's range and precision (Java's AbstractHistogram.init and
// getBucketsNeededToCoverValue), for the .hgrm footer.
func bucketGeometry(h *hdr.Histogram) (buckets, subBuckets int) {
	largestSingleUnit := 2 * int64(math.Pow10(int(h.SignificantFigures())))
	unitMagnitude := bits.Len64(uint64(h.LowestTrackableValue())) - 1    // floor(log2)
	subBucketCountMagnitude := bits.Len64(uint64(largestSingleUnit - 1)) // ceil(log2)
	subBuckets = 1 << max(subBucketCountMagnitude, 1)
	smallestUntrackable := int64(subBuckets) << unitMagnitude
	buckets = 1
	for smallestUntrackable <= h.HighestTrackableValue() {
		if smallestUntrackable > math.MaxInt64/2 {
			return buckets + 1, subBuckets
		}
		smallestUntrackable <<= 1
		buckets++
	}
	return buckets, subBuckets
}

// formatFixed formats x with prec decimals as Java's %.Nf and
// hdr-histogram-js's Intl.NumberFormat do: the shortest decimal that reads
// back as x, rounded half up. Go's %f rounds the exact binary value half to
// even, so it differs in the last digit on and near decimal ties (0.125 is
// "0.13" here, "0.12" from %.2f).
func formatFixed(x float64, prec int) string {
	switch {
	case math.IsNaN(x):
		return "NaN"
	case math.IsInf(x, 1):
		return "Infinity"
	case math.IsInf(x, -1):
		return "-Infinity"
	}
	sign := ""
	if x < 0 {
		sign, x = "-", -x
	}
	whole, frac, _ := strings.Cut(strconv.FormatFloat(x, 'f', -1, 64), ".")
	if len(frac) <= prec {
		frac += strings.Repeat("0", prec-len(frac))
	} else {
		up := frac[prec] >= '5'
		digits := []byte(whole + frac[:prec])
		for i := len(digits) - 1; up && i >= 0; i-- {
			if digits[i] == '9' {
				digits[i] = '0'
				continue
			}
			digits[i]++
			up = false
		}
		if up {
			digits = append([]byte{'1'}, digits...)
		}
		whole, frac = string(digits[:len(digits)-prec]), string(digits[len(digits)-prec:])
	}
	if prec == 0 {
		return sign + whole
	}
	return sign + whole + "." + frac
}

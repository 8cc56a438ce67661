// Reads an HdrHistogram interval log with hdr-histogram-js, an implementation
// independent of the Go one, and prints one JSON object with an entry per
// tag: the total count, the mean, the values at p50, p90, p99, p99.9 and
// p100 (raw histogram units) and the percentile distribution that
// outputPercentileDistribution prints.
//
//   node readhlog.js LOG [TAG=RATIO ...]
//
// RATIO divides the values of TAG's distribution (default 1000000: ns to ms,
// HistogramLogProcessor's default).
"use strict";

const fs = require("fs");
const hdr = require("hdr-histogram-js");

const [logPath, ...ratioArgs] = process.argv.slice(2);
if (!logPath) {
  console.error("usage: node readhlog.js LOG [TAG=RATIO ...]");
  process.exit(2);
}
const ratios = {};
for (const arg of ratioArgs) {
  const [tag, ratio] = arg.split("=");
  ratios[tag] = Number(ratio);
}

// 64-bit counts: no count can overflow while the intervals are summed.
const reader = new hdr.HistogramLogReader(fs.readFileSync(logPath, "utf8"), 64);
const totals = new Map();
for (let h; (h = reader.nextIntervalHistogram()) !== null; ) {
  const total = totals.get(h.tag);
  if (total === undefined) {
    totals.set(h.tag, h);
  } else {
    total.add(h);
  }
}

const out = {};
for (const [tag, h] of totals) {
  // hdr-histogram-js prints maxValue in the #[Max …] footer, which it keeps
  // one unit mask above the highest equivalent value of the top bucket (and
  // adds again on every add()); Java prints getMaxValue(), that highest
  // equivalent value, which is also the value at p100.
  h.maxValue = h.getValueAtPercentile(100);
  out[tag] = {
    count: h.totalCount,
    mean: h.mean,
    p50: h.getValueAtPercentile(50),
    p90: h.getValueAtPercentile(90),
    p99: h.getValueAtPercentile(99),
    p999: h.getValueAtPercentile(99.9),
    max: h.getValueAtPercentile(100),
    hgrm: h.outputPercentileDistribution(5, ratios[tag] || 1e6),
  };
}
process.stdout.write(JSON.stringify(out) + "\n");

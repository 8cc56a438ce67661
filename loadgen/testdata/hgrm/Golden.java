// Writes the .hgrm goldens of loadgen's percentile tests with the reference
// HdrHistogram (Java, org.hdrhistogram:HdrHistogram 2.2.x):
//
//   javac -cp HdrHistogram.jar Golden.java
//   java -cp HdrHistogram.jar:. Golden loadgen/testdata/hgrm
//
// The values are the ones goldenHistograms in percentile_test.go records.
import java.io.PrintStream;
import org.HdrHistogram.Histogram;

public class Golden {
    public static void main(String[] args) throws Exception {
        Histogram latency = new Histogram(1000, 600_000_000_000L, 3);
        for (long i = 0; i < 10_000; i++) {
            latency.recordValue(1000 + (i * i * 7919 + i * 104_729) % 50_000_000);
        }
        latency.recordValue(17);
        latency.recordValueWithCount(3_000_000_000L, 3);
        write(args[0] + "/latency.hgrm", latency, 1e6);

        Histogram attempts = new Histogram(1, 1_000_000, 3);
        for (long i = 0; i < 1000; i++) {
            attempts.recordValue(1 + (i * i) % 7);
        }
        attempts.recordValue(14);
        write(args[0] + "/attempts.hgrm", attempts, 1);

        write(args[0] + "/empty.hgrm", new Histogram(1000, 600_000_000_000L, 3), 1e6);
    }

    static void write(String path, Histogram h, double scale) throws Exception {
        try (PrintStream out = new PrintStream(path)) {
            h.outputPercentileDistribution(out, 5, scale);
        }
    }
}

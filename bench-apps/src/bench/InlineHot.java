package bench;

/**
 * A single hot, separately compiled method ({@link #hotLoop}) with a small helper ({@link #helper})
 * inlined into it.
 *
 * <p>Run with:
 *
 * <pre>
 *   java -XX:CompileCommand=inline,bench.InlineHot::helper \
 *        -XX:CompileCommand=dontinline,bench.InlineHot::hotLoop \
 *        -cp target/bench-apps/classes bench.InlineHot [seconds]
 * </pre>
 *
 * <p>Prints {@code READY} after about 2 s of warm-up, then runs until killed (or for the optional
 * number of seconds after READY).
 */
public final class InlineHot {
    /** Results are published here so nothing can be constant-folded or dead-code eliminated. */
    static volatile long sink;

    /** Mixed into every helper call; a (non-final) field, so the JIT must load it. */
    static long salt = 0x9E3779B97F4A7C15L;

    /** Loop trip count of one hotLoop call; calibrated during warm-up to take ~2 ms. */
    static int iterations = 100_000;

    static final long WARMUP_NANOS = 2_000_000_000L;
    static final long TARGET_CALL_NANOS = 2_000_000L;

    private InlineHot() {}

    /** The hot method: its own nmethod (dontinline), ~2 ms per call, helper inlined. */
    static long hotLoop(long seed, int n) {
        long acc = seed;
        for (int i = 0; i < n; i++) {
            acc = helper(acc, i);
        }
        return acc;
    }

    /** Small helper with real, data-dependent work spread over several lines. */
    static long helper(long acc, int i) {
        long x = acc * 6364136223846793005L + salt;
        x ^= x >>> 29;
        x += (long) i * 0x2545F4914F6CDD1DL;
        x = Long.rotateLeft(x, 17);
        return x ^ (x >>> 31);
    }

    /** One round of the driver: call hotLoop once and publish its result. */
    static long drive(long seed) {
        long r = hotLoop(seed, iterations);
        sink = r;
        return r;
    }

    public static void main(String[] args) throws Exception {
        long durationNanos = args.length > 0 ? (long) (Double.parseDouble(args[0]) * 1e9) : -1;
        long start = System.nanoTime();
        long seed = System.nanoTime();

        // Warm-up: get hotLoop C2-compiled and calibrate the trip count to ~2 ms per call.
        while (System.nanoTime() - start < WARMUP_NANOS) {
            long t0 = System.nanoTime();
            seed = drive(seed);
            long dt = System.nanoTime() - t0;
            if (dt > 0) {
                long scaled = (long) iterations * TARGET_CALL_NANOS / dt;
                // Smooth the adjustment; clamp to a sane range.
                long next = (iterations + scaled) / 2;
                iterations = (int) Math.max(10_000L, Math.min(50_000_000L, next));
            }
        }
        System.out.println("READY");
        System.out.flush();

        long ready = System.nanoTime();
        while (durationNanos < 0 || System.nanoTime() - ready < durationNanos) {
            seed = drive(seed);
        }
    }
}

package bench;

/**
 * A hot loop ({@link #hotLoop}) with two call sites the JIT decides differently when run with
 * CompileCommands: {@link #inlinedCallee} forced inline, {@link #notInlinedCallee} kept out.
 *
 * <p>Run with:
 *
 * <pre>
 *   java -XX:+UnlockDiagnosticVMOptions -XX:+LogCompilation -XX:LogFile=hotspot.log \
 *        -XX:CompileCommand=inline,bench.JitDecisions::inlinedCallee \
 *        -XX:CompileCommand=dontinline,bench.JitDecisions::notInlinedCallee \
 *        -cp target/bench-apps/classes bench.JitDecisions [seconds]
 * </pre>
 *
 * <p>Prints {@code READY} after about 2 s of warm-up, then runs until killed (or for the optional
 * number of seconds after READY).
 */
public final class JitDecisions {
    /** Results are published here so nothing can be constant-folded or dead-code eliminated. */
    static volatile long sink;

    /** A (non-final) field, so the JIT must load it. */
    static long salt = 0x9E3779B97F4A7C15L;

    private JitDecisions() {}

    /** The hot method: both callees on every iteration, about half the work in each. */
    static long hotLoop(long seed, int n) {
        long acc = seed;
        for (int i = 0; i < n; i++) {
            acc = inlinedCallee(acc, i);
            acc = notInlinedCallee(acc, i);
        }
        return acc;
    }

    static long inlinedCallee(long acc, int i) {
        long x = acc * 6364136223846793005L + salt;
        x ^= x >>> 29;
        x += (long) i * 0x2545F4914F6CDD1DL;
        return Long.rotateLeft(x, 17);
    }

    static long notInlinedCallee(long acc, int i) {
        long x = acc ^ (acc >>> 31);
        x *= 0xBF58476D1CE4E5B9L;
        x ^= (long) i << 7;
        return Long.rotateLeft(x, 23) + salt;
    }

    public static void main(String[] args) throws Exception {
        long durationNanos = args.length > 0 ? (long) (Double.parseDouble(args[0]) * 1e9) : -1;
        long start = System.nanoTime();
        long seed = System.nanoTime();
        while (System.nanoTime() - start < 2_000_000_000L) {
            seed = hotLoop(seed, 100_000);
            sink = seed;
        }
        System.out.println("READY");
        System.out.flush();
        long ready = System.nanoTime();
        while (durationNanos < 0 || System.nanoTime() - ready < durationNanos) {
            seed = hotLoop(seed, 100_000);
            sink = seed;
        }
    }
}

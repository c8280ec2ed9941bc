package bench;

/**
 * Java code interrupted by a signal handler, as another profiler's timer signal interrupts it.
 *
 * <p>Loads the native library given as the first argument (built by the test from C; it exports
 * {@code Java_bench_SignalSpin_startTimer}). The worker thread {@code signal-worker} starts a
 * timer on its own CPU-time clock that sends it SIGPROF {@code hz} times per CPU-second, whose
 * handler spins for {@code spinMicros} of CPU time, and then runs Java code: {@link #work} calls
 * {@link #recurse} {@value #DEPTH} frames deep, with an arithmetic loop at the bottom. So samples
 * land in the handler above whatever Java frame the signal interrupted.
 *
 * <p>Run with {@code java -cp target/bench-apps/classes bench.SignalSpin <library> [seconds]}.
 * Prints {@code READY} after 2 s of warm-up.
 */
public final class SignalSpin {
    static final int DEPTH = 8;
    static final int HZ = 1000;
    static final int SPIN_MICROS = 500;

    static volatile long sink;

    private SignalSpin() {}

    static native void startTimer(int hz, int spinMicros);

    static long work(long seed) {
        return recurse(DEPTH, seed);
    }

    static long recurse(int depth, long seed) {
        if (depth == 0) {
            long x = seed;
            for (int i = 0; i < 20_000; i++) {
                x = x * 6364136223846793005L + 1442695040888963407L;
                x ^= x >>> 29;
            }
            return x;
        }
        return recurse(depth - 1, seed + depth) ^ depth;
    }

    public static void main(String[] args) throws Exception {
        System.load(args[0]);
        Thread worker =
                new Thread(
                        () -> {
                            startTimer(HZ, SPIN_MICROS);
                            long seed = 1;
                            while (true) {
                                seed = work(seed);
                                sink = seed;
                            }
                        },
                        "signal-worker");
        worker.setDaemon(true);
        worker.start();
        Thread.sleep(2000);
        System.out.println("READY");
        System.out.flush();
        long seconds = args.length > 1 ? Long.parseLong(args[1]) : 3600;
        Thread.sleep(seconds * 1000);
    }
}

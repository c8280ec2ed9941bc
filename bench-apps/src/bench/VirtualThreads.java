package bench;

import java.lang.reflect.Method;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.TimeUnit;

/**
 * CPU-bound work on many virtual threads (JDK 21+): {@link #task} should own nearly all samples.
 *
 * <p>Compiled with {@code --release 11}, so the virtual-thread API is reached by reflection. Keeps
 * 2 000 virtual threads busy in waves: each runs {@link #task} for a few milliseconds, yielding now and
 * then so virtual threads unmount and remount on the carriers. Prints {@code READY} once the first
 * wave has run; runs until killed (or for the optional number of seconds).
 *
 * <p>Usage: {@code java -cp target/bench-apps/classes bench.VirtualThreads [seconds]}
 */
public final class VirtualThreads {
    static volatile long sink;

    private VirtualThreads() {}

    /** The CPU-bound work of one virtual thread. */
    static long task(long seed, long nanos) {
        long end = System.nanoTime() + nanos;
        long x = seed;
        int i = 0;
        while (System.nanoTime() < end) {
            for (int k = 0; k < 2_000; k++) {
                x = x * 6364136223846793005L + 1442695040888963407L;
                x ^= x >>> 31;
            }
            if (++i % 64 == 0) {
                Thread.yield();
            }
        }
        return x;
    }

    static ExecutorService virtualExecutor() throws Exception {
        Method m = java.util.concurrent.Executors.class.getMethod("newVirtualThreadPerTaskExecutor");
        return (ExecutorService) m.invoke(null);
    }

    static void wave(int threads) throws Exception {
        ExecutorService ex = virtualExecutor();
        for (int t = 0; t < threads; t++) {
            final long seed = t;
            ex.submit(() -> {
                sink = task(seed, 3_000_000L);
            });
        }
        ex.shutdown();
        ex.awaitTermination(1, TimeUnit.HOURS);
    }

    public static void main(String[] args) throws Exception {
        long durationNanos = args.length > 0 ? (long) (Double.parseDouble(args[0]) * 1e9) : -1;
        wave(200);
        System.out.println("READY");
        System.out.flush();
        long start = System.nanoTime();
        while (durationNanos < 0 || System.nanoTime() - start < durationNanos) {
            wave(2_000);
        }
    }
}

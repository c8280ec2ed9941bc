package bench;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.zip.Deflater;

/**
 * Ground truth for profiler accuracy tests.
 *
 * <p>Worker thread(s) run four phases round robin, {@value #SLICE_MS} ms of wall time each, and
 * account their own thread CPU time to the phase that was running:
 *
 * <ul>
 *   <li>{@code hotLoop}: {@link #hotLoop}, a C2-compiled loop calling {@link #inlinedHelper}
 *       (forced inline);
 *   <li>{@code interpreted}: {@link #interpretedPhase}, excluded from compilation, arithmetic in
 *       its own body;
 *   <li>{@code jni}: {@link #jniPhase}, {@link Deflater} compressing a buffer (time in libz);
 *   <li>{@code recursive}: {@link #recursivePhase} calling {@link #recurse} {@value #DEPTH} frames
 *       deep, arithmetic at the bottom.
 * </ul>
 *
 * <p>Run with:
 *
 * <pre>
 *   java -XX:CompileCommand=inline,bench.Phases::inlinedHelper \
 *        -XX:CompileCommand=exclude,bench.Phases::interpretedPhase \
 *        -cp target/bench-apps/classes bench.Phases [--threads N] [--aligned-slice-ms MS] [seconds]
 * </pre>
 *
 * <p>With {@code --aligned-slice-ms MS} the phases are separated in time instead: every worker runs
 * phase {@code k % 4} from {@code EPOCH + k * MS} ms to {@code EPOCH + (k + 1) * MS} ms, where
 * {@code EPOCH <System.nanoTime()>} is printed before {@code READY}.
 *
 * <p>Output: {@code READY} after ~2 s of warm-up, then every 100 ms {@code GT <System.nanoTime()>
 * hotLoop=<ns> interpreted=<ns> jni=<ns> recursive=<ns>}: cumulative thread CPU ns per phase
 * since start, summed over all worker threads. Values include the CPU of the slice currently
 * running (read via {@link ThreadMXBean#getThreadCpuTime(long)}), so they are exact to within
 * a few microseconds at the printed timestamp. Worker threads are named {@code phases-worker}
 * (first) and {@code phases-worker-1}, {@code phases-worker-2}, ... (additional ones).
 */
public final class Phases {
    static final String[] PHASE_NAMES = {"hotLoop", "interpreted", "jni", "recursive"};
    static final int HOT_LOOP = 0;
    static final int INTERPRETED = 1;
    static final int JNI = 2;
    static final int RECURSIVE = 3;

    static final long SLICE_MS = 25;
    static final long SLICE_NANOS = SLICE_MS * 1_000_000L;
    static final int DEPTH = 128;
    static final long WARMUP_NANOS = 2_000_000_000L;
    static final long REPORT_NANOS = 100_000_000L;

    static final ThreadMXBean MX = ManagementFactory.getThreadMXBean();

    /** With --aligned-slice-ms: the length of a phase, and when phase 0 first started. */
    static long alignedSliceNanos;
    static long epoch;

    /** Results are published here so the work cannot be optimized away. */
    static volatile long sink;

    /** Mixed into the hot loop; a field so the JIT has to load it. */
    static int salt = 0x5BD1E995;

    private Phases() {}

    /** Per-worker accounting, guarded by {@code this}. */
    static final class Worker implements Runnable {
        final Thread thread;
        final long[] cpu = new long[PHASE_NAMES.length];
        int current = HOT_LOOP;
        long sliceStartCpu;
        final byte[] input = compressibleData(16 * 1024, 42);
        final byte[] output = new byte[20 * 1024];
        final Deflater deflater = new Deflater(6);

        Worker(String name) {
            thread = new Thread(this, name);
            thread.setDaemon(true);
        }

        @Override
        public void run() {
            synchronized (this) {
                sliceStartCpu = MX.getCurrentThreadCpuTime();
            }
            long seed = System.nanoTime();
            for (int phase = 0; ; phase = (phase + 1) % PHASE_NAMES.length) {
                long deadline = System.nanoTime() + SLICE_NANOS;
                if (alignedSliceNanos > 0) {
                    long k = (System.nanoTime() - epoch) / alignedSliceNanos;
                    phase = (int) (k % PHASE_NAMES.length);
                    deadline = epoch + (k + 1) * alignedSliceNanos;
                }
                switch (phase) {
                    case HOT_LOOP:
                        seed += hotLoop(seed, deadline);
                        break;
                    case INTERPRETED:
                        seed += interpretedPhase(seed, deadline);
                        break;
                    case JNI:
                        seed += jniPhase(deflater, input, output, deadline);
                        break;
                    default:
                        seed += recursivePhase(seed, deadline);
                        break;
                }
                synchronized (this) {
                    // Measured under the lock so a concurrent addTo() never sees a value that a
                    // later report would have to take back: GT values are monotonic.
                    long now = MX.getCurrentThreadCpuTime();
                    cpu[phase] += now - sliceStartCpu;
                    sliceStartCpu = now;
                    current = (phase + 1) % PHASE_NAMES.length;
                }
                sink = seed;
            }
        }

        /** Adds this worker's cumulative per-phase CPU, including the running slice, to sums. */
        synchronized void addTo(long[] sums) {
            long now = MX.getThreadCpuTime(thread.getId());
            for (int i = 0; i < sums.length; i++) {
                sums[i] += cpu[i];
            }
            if (now > sliceStartCpu) {
                sums[current] += now - sliceStartCpu;
            }
        }
    }

    // ---------------------------------------------------------------- phase (a): compiled hot loop

    static long hotLoop(long seed, long deadline) {
        long acc = seed;
        do {
            for (int i = 0; i < 20_000; i++) {
                acc = inlinedHelper(acc, i);
            }
        } while (System.nanoTime() < deadline);
        return acc;
    }

    static long inlinedHelper(long acc, int i) {
        long x = acc * 6364136223846793005L + salt;
        x ^= x >>> 29;
        x += i;
        return Long.rotateLeft(x, 13);
    }

    // ------------------------------------------------------------- phase (b): interpreted arithmetic

    /** Excluded from compilation by the tests; all work is in this method's own body. */
    static long interpretedPhase(long seed, long deadline) {
        long acc = seed;
        int a = (int) seed | 1;
        do {
            for (int i = 0; i < 2_000; i++) {
                a = a * 1103515245 + 12345;
                acc += a ^ (acc >>> 7);
                acc = (acc << 3) - acc + i;
            }
        } while (System.nanoTime() < deadline);
        return acc;
    }

    // ------------------------------------------------------------------------ phase (c): JNI (libz)

    static long jniPhase(Deflater deflater, byte[] input, byte[] output, long deadline) {
        long total = 0;
        do {
            deflater.reset();
            deflater.setInput(input);
            deflater.finish();
            while (!deflater.finished()) {
                total += deflater.deflate(output);
            }
        } while (System.nanoTime() < deadline);
        return total;
    }

    /** Pseudo-random bytes drawn from a small skewed alphabet: compressible but not trivially. */
    static byte[] compressibleData(int size, long seed) {
        byte[] b = new byte[size];
        long x = seed;
        for (int i = 0; i < size; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            int r = (int) (x >>> 58); // 0..63
            b[i] = (byte) ("eeeeeeetttttaaaaoooiiinnnsshhrrdlcumwfgypbvkjxqz \n.,;ETAOINSHRDLU0123".charAt(r));
        }
        return b;
    }

    // ---------------------------------------------------------------------- phase (d): deep recursion

    static long recursivePhase(long seed, long deadline) {
        return recurse(DEPTH, seed, deadline);
    }

    /** Recurses {@code depth} frames, then does arithmetic until the deadline at the bottom. */
    static long recurse(int depth, long seed, long deadline) {
        if (depth > 0) {
            return recurse(depth - 1, seed + depth, deadline) + 1;
        }
        long acc = seed;
        do {
            for (int i = 0; i < 20_000; i++) {
                acc = acc * 2862933555777941757L + 3037000493L + i;
                acc ^= acc >>> 33;
            }
        } while (System.nanoTime() < deadline);
        return acc;
    }

    // ------------------------------------------------------------------------------------- driver

    public static void main(String[] args) throws Exception {
        int threads = 1;
        double seconds = -1;
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--threads")) {
                threads = Integer.parseInt(args[++i]);
            } else if (args[i].equals("--aligned-slice-ms")) {
                alignedSliceNanos = Long.parseLong(args[++i]) * 1_000_000L;
            } else {
                seconds = Double.parseDouble(args[i]);
            }
        }
        if (!MX.isCurrentThreadCpuTimeSupported()) {
            throw new IllegalStateException("thread CPU time not supported");
        }
        MX.setThreadCpuTimeEnabled(true);

        Worker[] workers = new Worker[threads];
        for (int i = 0; i < threads; i++) {
            workers[i] = new Worker(i == 0 ? "phases-worker" : "phases-worker-" + i);
        }
        epoch = System.nanoTime();
        if (alignedSliceNanos > 0) {
            System.out.println("EPOCH " + epoch);
        }
        for (Worker w : workers) {
            w.thread.start();
        }
        Thread.currentThread().setName("phases-reporter");

        Thread.sleep(WARMUP_NANOS / 1_000_000L);
        System.out.println("READY");
        System.out.flush();
        long ready = System.nanoTime();

        long[] sums = new long[PHASE_NAMES.length];
        StringBuilder sb = new StringBuilder(128);
        for (long next = ready; ; next += REPORT_NANOS) {
            long sleep = next - System.nanoTime();
            if (sleep > 0) {
                Thread.sleep(sleep / 1_000_000L, (int) (sleep % 1_000_000L));
            }
            java.util.Arrays.fill(sums, 0);
            long now = System.nanoTime();
            for (Worker w : workers) {
                w.addTo(sums);
            }
            sb.setLength(0);
            sb.append("GT ").append(now);
            for (int i = 0; i < sums.length; i++) {
                sb.append(' ').append(PHASE_NAMES[i]).append('=').append(sums[i]);
            }
            System.out.println(sb);
            System.out.flush();
            if (seconds >= 0 && now - ready >= (long) (seconds * 1e9)) {
                return;
            }
        }
    }
}

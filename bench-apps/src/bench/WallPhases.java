package bench;

import java.util.concurrent.locks.LockSupport;

/**
 * Ground truth for wall-clock profiling: worker threads cycle through three phases and time each
 * with {@link System#nanoTime()} (CLOCK_MONOTONIC on Linux, the profiler's sample clock):
 *
 * <ul>
 *   <li>{@code computePhase}: arithmetic on the CPU for {@value #COMPUTE_MS} ms;
 *   <li>{@code sleepPhase}: {@link Thread#sleep(long)} for {@value #SLEEP_MS} ms;
 *   <li>{@code parkPhase}: {@link LockSupport#parkNanos(long)} in slices of {@value #PARK_SLICE_MS}
 *       ms for {@value #PARK_MS} ms (many short waits, as in a thread pool).
 * </ul>
 *
 * <p>Run with {@code java -cp target/bench-apps/classes bench.WallPhases [--threads N]
 * [seconds]}. Output: {@code READY} after ~2 s of warm-up, then every 100 ms {@code GT
 * <System.nanoTime()> compute=<ns> sleep=<ns> park=<ns>}: cumulative wall ns per phase since
 * start, summed over the workers, the running phase included up to the printed time. Workers are
 * named {@code wall-worker-0}, {@code wall-worker-1}, …
 */
public final class WallPhases {
    static final String[] PHASE_NAMES = {"compute", "sleep", "park"};
    static final long COMPUTE_MS = 30;
    static final long SLEEP_MS = 20;
    static final long PARK_MS = 50;
    static final long PARK_SLICE_MS = 2;
    static final long WARMUP_NANOS = 2_000_000_000L;
    static final long REPORT_NANOS = 100_000_000L;

    static volatile long sink;

    private WallPhases() {}

    static final class Worker implements Runnable {
        final Thread thread;
        final long[] wall = new long[PHASE_NAMES.length];
        int current;
        long phaseStart;

        Worker(int index) {
            thread = new Thread(this, "wall-worker-" + index);
            thread.setDaemon(true);
        }

        @Override
        public void run() {
            synchronized (this) {
                phaseStart = System.nanoTime();
            }
            long seed = phaseStart;
            for (int phase = 0; ; phase = (phase + 1) % PHASE_NAMES.length) {
                switch (phase) {
                    case 0:
                        seed += computePhase(seed, phaseStart + COMPUTE_MS * 1_000_000L);
                        break;
                    case 1:
                        sleepPhase();
                        break;
                    default:
                        parkPhase(phaseStart + PARK_MS * 1_000_000L);
                        break;
                }
                synchronized (this) {
                    long now = System.nanoTime();
                    wall[phase] += now - phaseStart;
                    phaseStart = now;
                    current = (phase + 1) % PHASE_NAMES.length;
                }
                sink = seed;
            }
        }

        synchronized void addTo(long[] sums, long now) {
            for (int i = 0; i < sums.length; i++) {
                sums[i] += wall[i];
            }
            if (now > phaseStart) {
                sums[current] += now - phaseStart;
            }
        }
    }

    static long computePhase(long seed, long deadline) {
        long acc = seed;
        do {
            for (int i = 0; i < 10_000; i++) {
                acc = acc * 6364136223846793005L + 1442695040888963407L + i;
                acc ^= acc >>> 31;
            }
        } while (System.nanoTime() < deadline);
        return acc;
    }

    static void sleepPhase() {
        try {
            Thread.sleep(SLEEP_MS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    static void parkPhase(long deadline) {
        long left;
        while ((left = deadline - System.nanoTime()) > 0) {
            LockSupport.parkNanos(Math.min(left, PARK_SLICE_MS * 1_000_000L));
        }
    }

    public static void main(String[] args) throws InterruptedException {
        int threads = 2;
        long seconds = 3600;
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--threads")) {
                threads = Integer.parseInt(args[++i]);
            } else {
                seconds = Long.parseLong(args[i]);
            }
        }
        Worker[] workers = new Worker[threads];
        for (int i = 0; i < threads; i++) {
            workers[i] = new Worker(i);
            workers[i].thread.start();
        }
        Thread.sleep(WARMUP_NANOS / 1_000_000L);
        System.out.println("READY");
        System.out.flush();
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        // The first line at once: a recording started at READY samples from its first moment.
        for (boolean first = true; System.nanoTime() < end; first = false) {
            if (!first) {
                Thread.sleep(REPORT_NANOS / 1_000_000L);
            }
            long now = System.nanoTime();
            long[] sums = new long[PHASE_NAMES.length];
            for (Worker w : workers) {
                w.addTo(sums, now);
            }
            StringBuilder line = new StringBuilder("GT ").append(now);
            for (int i = 0; i < sums.length; i++) {
                line.append(' ').append(PHASE_NAMES[i]).append('=').append(sums[i]);
            }
            System.out.println(line);
            System.out.flush();
        }
    }
}

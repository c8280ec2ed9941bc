package bench;

import java.util.concurrent.locks.LockSupport;

/**
 * Fixed-size units of CPU-bound work on N threads, counted, for profiler overhead benchmarks.
 *
 * <p>Each worker thread ({@code throughput-worker-0}, {@code -1}, ...) repeats one unit of work:
 * {@link #recurse} goes {@value #DEPTH} Java frames deep and runs an arithmetic loop of {@value
 * #LOOP} iterations at the bottom (a few microseconds). After each unit the worker publishes its
 * count. Every 100 ms the main thread prints {@code WORK <System.nanoTime()> <units>}: the units
 * completed by all workers since they started. The rate of work between two WORK lines, with and
 * without a profiler attached, gives the profiler's cost.
 *
 * <p>With {@code --handoff} the workers pass a token round the ring after every unit, parking
 * until it comes back ({@link LockSupport}): one runs at a time, and every unit costs a context
 * switch out and one in, as in a thread pool handing small tasks on. Profilers that do work per
 * context switch (wall-clock modes) show their cost there.
 *
 * <p>With {@code --spawn} each unit runs on a thread of its own ({@code throughput-unit}) that the
 * worker starts and joins: every unit costs a thread start and end, as in a JVM that creates a
 * thread per task. Profilers that do work per thread (agents' ThreadStart/ThreadEnd callbacks,
 * per-thread events) show their cost there. {@code --long-names} names those threads {@code
 * throughput-unit-} followed by 5,000 euro signs (15,016 bytes of UTF-8), for agents that must cut
 * names.
 *
 * <p>Run with {@code java -cp target/bench-apps/classes bench.Throughput [--threads N]
 * [--handoff | --spawn [--long-names]] [seconds]} (default 2 threads). Prints {@code READY} after 2
 * s of warm-up.
 */
public final class Throughput {
    /** The worker whose turn it is, with {@code --handoff}. */
    static volatile Worker turn;
    static boolean handoff;
    static boolean spawn;
    static String unitName = "throughput-unit";

    static final int DEPTH = 32;
    static final int LOOP = 4000;
    static final long WARMUP_NANOS = 2_000_000_000L;
    static final long REPORT_NANOS = 100_000_000L;

    /** Results are published here so the work cannot be optimized away. */
    static volatile long sink;

    private Throughput() {}

    static final class Worker extends Thread {
        volatile long units;
        Worker next;

        Worker(int i) {
            super("throughput-worker-" + i);
            setDaemon(true);
        }

        @Override
        public void run() {
            long seed = getId();
            long done = 0;
            while (true) {
                if (handoff) {
                    while (turn != this) {
                        LockSupport.park(this);
                    }
                }
                seed = spawn ? onOwnThread(seed) : recurse(DEPTH, seed);
                units = ++done;
                if (handoff) {
                    turn = next;
                    LockSupport.unpark(next);
                }
                if ((done & 1023) == 0) {
                    sink = seed;
                }
            }
        }
    }

    /** One unit on a new thread, started and joined. */
    static long onOwnThread(long seed) {
        long[] out = {seed};
        Thread t = new Thread(() -> out[0] = recurse(DEPTH, out[0]), unitName);
        t.start();
        while (true) {
            try {
                t.join();
                return out[0];
            } catch (InterruptedException e) {
                // not interrupted in this benchmark; keep waiting
            }
        }
    }

    static long recurse(int depth, long seed) {
        if (depth == 0) {
            return compute(seed);
        }
        return recurse(depth - 1, seed + depth) ^ depth;
    }

    static long compute(long seed) {
        long x = seed;
        for (int i = 0; i < LOOP; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >>> 29;
        }
        return x;
    }

    public static void main(String[] args) throws InterruptedException {
        int threads = 2;
        long seconds = -1;
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--threads")) {
                threads = Integer.parseInt(args[++i]);
            } else if (args[i].equals("--handoff")) {
                handoff = true;
            } else if (args[i].equals("--spawn")) {
                spawn = true;
            } else if (args[i].equals("--long-names")) {
                unitName = "throughput-unit-" + "\u20ac".repeat(5000);
            } else {
                seconds = Long.parseLong(args[i]);
            }
        }
        Worker[] workers = new Worker[threads];
        for (int i = 0; i < threads; i++) {
            workers[i] = new Worker(i);
        }
        for (int i = 0; i < threads; i++) {
            workers[i].next = workers[(i + 1) % threads];
        }
        turn = workers[0];
        for (Worker w : workers) {
            w.start();
        }
        Thread.sleep(WARMUP_NANOS / 1_000_000);
        System.out.println("READY");
        System.out.flush();
        long start = System.nanoTime();
        long next = start;
        while (seconds < 0 || System.nanoTime() - start < seconds * 1_000_000_000L) {
            long total = 0;
            for (Worker w : workers) {
                total += w.units;
            }
            System.out.println("WORK " + System.nanoTime() + " " + total);
            System.out.flush();
            next += REPORT_NANOS;
            long sleep = next - System.nanoTime();
            if (sleep > 0) {
                Thread.sleep(sleep / 1_000_000, (int) (sleep % 1_000_000));
            }
        }
    }
}

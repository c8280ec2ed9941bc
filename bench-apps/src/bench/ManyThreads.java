package bench;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A JVM with thousands of threads that each run briefly, as a large thread pool does: ground truth
 * for sampling that must cover every thread.
 *
 * <ul>
 *   <li>{@code --pool N} threads ({@code pool-<i>}, default 3000) each sleep ~200 ms (150–250 ms at
 *       random), then run {@link #poolWork} for {@code --burst-us} (default 50) µs of their own CPU
 *       time;
 *   <li>{@code --busy M} threads ({@code busy-<i>}, default 4) run {@link #busyWork} all the time;
 *   <li>with {@code --short-lived}, a spawner starts a thread ({@code short-<i>}) every 40 ms that
 *       runs {@link #shortLivedWork} for 20–50 ms of its own CPU time and ends.
 * </ul>
 *
 * <p>Each thread measures its own CPU time ({@link ThreadMXBean#getCurrentThreadCpuTime}) around
 * its work and adds it to its group. Prints {@code READY} 3 s after every thread has started, then every
 * 100 ms {@code GT <System.nanoTime()> pool=<ns> busy=<ns> short=<ns>}: cumulative CPU ns per
 * group since start.
 *
 * <p>Run with: {@code java -cp target/bench-apps/classes bench.ManyThreads [--pool N] [--busy M]
 * [--burst-us U] [--short-lived] [seconds]}.
 */
public final class ManyThreads {
    static final ThreadMXBean MX = ManagementFactory.getThreadMXBean();
    static final AtomicLong POOL_NS = new AtomicLong();
    static final AtomicLong BUSY_NS = new AtomicLong();
    static final AtomicLong SHORT_NS = new AtomicLong();
    static volatile long sink;

    static long cpu() {
        return MX.getCurrentThreadCpuTime();
    }

    /**
     * Spins for {@code ns} of this thread's CPU time, adding what it used to {@code group} as it
     * goes (so the ground truth never lags a thread's work by more than ~30 µs).
     */
    static void spin(long ns, AtomicLong group) {
        long start = cpu();
        long last = start;
        long x = Thread.currentThread().getId();
        long now;
        do {
            for (int i = 0; i < 20000; i++) {
                x = x * 6364136223846793005L + 1442695040888963407L;
                x ^= x >>> 29;
            }
            now = cpu();
            group.addAndGet(now - last);
            last = now;
        } while (now - start < ns);
        sink = x;
    }

    static void poolWork(long burstNs) {
        spin(burstNs, POOL_NS);
    }

    static void busyWork() {
        spin(1_000_000, BUSY_NS);
    }

    static void shortLivedWork(long ns) {
        spin(ns, SHORT_NS);
    }

    static Thread daemon(String name, Runnable body) {
        Thread t = new Thread(body, name);
        t.setDaemon(true);
        t.start();
        return t;
    }

    public static void main(String[] args) throws InterruptedException {
        int pool = 3000;
        int busy = 4;
        long burstNs = 50_000;
        boolean shortLived = false;
        long seconds = -1;
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--pool")) {
                pool = Integer.parseInt(args[++i]);
            } else if (args[i].equals("--busy")) {
                busy = Integer.parseInt(args[++i]);
            } else if (args[i].equals("--burst-us")) {
                burstNs = Long.parseLong(args[++i]) * 1000;
            } else if (args[i].equals("--short-lived")) {
                shortLived = true;
            } else {
                seconds = Long.parseLong(args[i]);
            }
        }
        final long burst = burstNs;
        // Compiled before thousands of threads run it: interpreted, a burst would take ms.
        for (int i = 0; i < 200; i++) {
            spin(1_000_000, new AtomicLong());
        }
        for (int i = 0; i < pool; i++) {
            daemon("pool-" + i, () -> {
                ThreadLocalRandom random = ThreadLocalRandom.current();
                while (true) {
                    try {
                        Thread.sleep(150 + random.nextInt(101));
                    } catch (InterruptedException e) {
                        return;
                    }
                    poolWork(burst);
                }
            });
        }
        for (int i = 0; i < busy; i++) {
            daemon("busy-" + i, () -> {
                while (true) {
                    busyWork();
                }
            });
        }
        if (shortLived) {
            daemon("short-spawner", () -> {
                ThreadLocalRandom random = ThreadLocalRandom.current();
                for (long n = 0; ; n++) {
                    long ns = (20 + random.nextInt(31)) * 1_000_000L;
                    daemon("short-" + n, () -> shortLivedWork(ns));
                    try {
                        Thread.sleep(40);
                    } catch (InterruptedException e) {
                        return;
                    }
                }
            });
        }
        // The first seconds of thousands of threads (their first bursts, the JIT) are not steady.
        Thread.sleep(3000);
        System.out.println("READY");
        long end = seconds < 0 ? Long.MAX_VALUE : System.nanoTime() + seconds * 1_000_000_000L;
        // The first line at once: a recording started at READY samples from its first moment.
        while (true) {
            System.out.println("GT " + System.nanoTime() + " pool=" + POOL_NS.get() + " busy="
                    + BUSY_NS.get() + " short=" + SHORT_NS.get());
            if (System.nanoTime() >= end) {
                break;
            }
            Thread.sleep(100);
        }
    }
}

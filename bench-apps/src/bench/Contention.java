package bench;

import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.ReentrantLock;

/**
 * Ground truth for lock profiling: threads contend on a {@code synchronized} monitor and on a
 * {@code ReentrantLock}, each from a method of its own, and time their own waits with {@code
 * System.nanoTime}:
 *
 * <ul>
 *   <li>{@code onMonitor}: {@value #MONITOR_THREADS} threads ({@code monitor-N}) enter {@code
 *       synchronized (account)}, an {@link Account}, and hold it {@value #MONITOR_HOLD_MS} ms;
 *   <li>{@code onLock}: {@value #LOCK_THREADS} threads ({@code lock-N}) take a fair {@code
 *       ReentrantLock} and hold it {@value #LOCK_HOLD_MS} ms.
 * </ul>
 *
 * <p>Between two acquisitions each thread works outside the lock for a while, so that waits vary.
 * Run with {@code java -cp target/bench-apps/classes bench.Contention [seconds]}. Output: {@code
 * READY} after ~2 s of warm-up, then every 100 ms {@code GT <System.nanoTime()> monitor=<ns>
 * lock=<ns>}: the nanoseconds the site's threads waited to acquire since they started; at the end
 * {@code DONE} with the same figures.
 */
public final class Contention {
    static final int MONITOR_THREADS = 4;
    static final int LOCK_THREADS = 3;
    static final long MONITOR_HOLD_MS = 1;
    static final long LOCK_HOLD_MS = 2;
    static final long WARMUP_NANOS = 2_000_000_000L;
    static final long REPORT_NANOS = 100_000_000L;

    private Contention() {}

    /** The object whose monitor the first site contends on. */
    static final class Account {
        long balance;
    }

    static final Account ACCOUNT = new Account();
    static final ReentrantLock LOCK = new ReentrantLock(true);
    static final AtomicLong MONITOR_WAITED = new AtomicLong();
    static final AtomicLong LOCK_WAITED = new AtomicLong();

    static void hold(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** Work outside the lock: a few hundred microseconds of arithmetic. */
    static long work(long seed) {
        long x = seed;
        for (int i = 0; i < 200_000; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
        }
        return x;
    }

    static void onMonitor(long seed) {
        long start = System.nanoTime();
        synchronized (ACCOUNT) {
            MONITOR_WAITED.addAndGet(System.nanoTime() - start);
            ACCOUNT.balance += seed & 1;
            hold(MONITOR_HOLD_MS);
        }
    }

    static void onLock() {
        long start = System.nanoTime();
        LOCK.lock();
        try {
            LOCK_WAITED.addAndGet(System.nanoTime() - start);
            hold(LOCK_HOLD_MS);
        } finally {
            LOCK.unlock();
        }
    }

    static void start(String name, Runnable site) {
        Thread t =
                new Thread(
                        () -> {
                            long seed = name.hashCode();
                            while (!Thread.currentThread().isInterrupted()) {
                                site.run();
                                seed = work(seed);
                            }
                        },
                        name);
        t.setDaemon(true);
        t.start();
    }

    public static void main(String[] args) throws InterruptedException {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 3600;
        for (int i = 0; i < MONITOR_THREADS; i++) {
            long seed = i;
            start("monitor-" + i, () -> onMonitor(seed));
        }
        for (int i = 0; i < LOCK_THREADS; i++) {
            start("lock-" + i, Contention::onLock);
        }
        Thread.sleep(WARMUP_NANOS / 1_000_000L);
        System.out.println("READY");
        System.out.flush();
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        for (boolean first = true; ; first = false) {
            if (!first) {
                Thread.sleep(REPORT_NANOS / 1_000_000L);
            }
            long now = System.nanoTime();
            System.out.println(
                    (now < end ? "GT " : "DONE ")
                            + now
                            + " monitor="
                            + MONITOR_WAITED.get()
                            + " lock="
                            + LOCK_WAITED.get());
            System.out.flush();
            if (now >= end) {
                return;
            }
        }
    }
}

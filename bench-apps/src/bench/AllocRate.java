package bench;

import java.lang.management.ManagementFactory;

/**
 * As much allocation as the threads can do, counted, for the cost of allocation profilers ({@code
 * cargo xtask bench alloc}).
 *
 * <p>Each worker thread ({@code alloc-rate-0}, {@code -1}, ...) repeats one unit: {@link #unit}
 * builds a linked list of {@value #NODES} small objects ({@link Node}, 24 bytes), half of them
 * carrying a small array ({@code int[8]}, 48 bytes), all inside TLABs, and publishes its head; every
 * {@value #LARGE_EVERY}th unit also allocates a {@code long[}{@value #LARGE_LONGS}{@code ]}
 * (768 KiB, outside TLABs: a humongous object in G1's regions of 1 MiB or less). The list escapes,
 * so the JIT cannot remove the allocations; it dies at the next unit, so nearly everything dies
 * young. After each unit the worker publishes its count. Every 100 ms the main thread prints
 * {@code WORK <System.nanoTime()> <units>}: the units completed by all workers since they started
 * (as {@link Throughput} does).
 *
 * <p>Run with {@code java -cp target/bench-apps/classes bench.AllocRate [--threads N] [--work N]
 * [seconds]} (default 2 threads, {@code --work 400}). Prints {@code READY} after {@value #WARMUP_SECS} s of warm-up, then {@code
 * BYTES_PER_UNIT <n>}: the bytes the workers allocated per unit during the warm-up, as the JVM
 * counts them ({@code com.sun.management.ThreadMXBean.getThreadAllocatedBytes}), then WORK lines.
 */
public final class AllocRate {
    static final int NODES = 64;
    static final int LARGE_EVERY = 2048;
    static final int LARGE_LONGS = 96 * 1024;
    static final long WARMUP_SECS = 3;
    static final long REPORT_NANOS = 100_000_000L;

    /** Each unit's list head and large array are published here, so they escape. */
    static volatile Object sink;

    static volatile Object largeSink;

    static volatile long workSink;

    /** Iterations of {@link #compute} per unit ({@code --work}). */
    static int work = 400;

    private AllocRate() {}

    /** A small object: 12 bytes of header, two references and an int (24 bytes). */
    static final class Node {
        final Object payload;
        final Node next;
        final int value;

        Node(Object payload, Node next, int value) {
            this.payload = payload;
            this.next = next;
            this.value = value;
        }
    }

    static final class Worker extends Thread {
        volatile long units;

        Worker(int i) {
            super("alloc-rate-" + i);
            setDaemon(true);
        }

        @Override
        public void run() {
            long done = 0;
            while (true) {
                Node head = unit((int) done);
                sink = head;
                if (work > 0) {
                    workSink = compute(head, work);
                }
                if (++done % LARGE_EVERY == 0) {
                    largeSink = largeArray();
                }
                units = done;
            }
        }
    }

    /** Small objects and small arrays, inside TLABs. */
    static Node unit(int seed) {
        Node head = null;
        for (int i = 0; i < NODES; i++) {
            Object payload = (i & 1) == 0 ? new int[8] : null;
            head = new Node(payload, head, seed + i);
        }
        return head;
    }

    /**
     * The work done with each unit's objects: {@code n} rounds of a multiply-xorshift hash over the
     * list's values, so that allocation is a share of the time, as in an application.
     */
    static long compute(Node head, int n) {
        long x = 0;
        Node node = head;
        for (int i = 0; i < n; i++) {
            if (node == null) {
                node = head;
            }
            x = (x + node.value) * 6364136223846793005L + 1442695040888963407L;
            x ^= x >>> 29;
            node = node.next;
        }
        return x;
    }

    /** An array too large for a TLAB. */
    static long[] largeArray() {
        return new long[LARGE_LONGS];
    }

    static long allocated(com.sun.management.ThreadMXBean mx, Worker[] workers) {
        long sum = 0;
        for (Worker w : workers) {
            sum += mx.getThreadAllocatedBytes(w.getId());
        }
        return sum;
    }

    static long units(Worker[] workers) {
        long total = 0;
        for (Worker w : workers) {
            total += w.units;
        }
        return total;
    }

    public static void main(String[] args) throws InterruptedException {
        int threads = 2;
        long seconds = -1;
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--threads")) {
                threads = Integer.parseInt(args[++i]);
            } else if (args[i].equals("--work")) {
                work = Integer.parseInt(args[++i]);
            } else {
                seconds = Long.parseLong(args[i]);
            }
        }
        com.sun.management.ThreadMXBean mx =
                (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
        Worker[] workers = new Worker[threads];
        for (int i = 0; i < threads; i++) {
            workers[i] = new Worker(i);
        }
        for (Worker w : workers) {
            w.start();
        }
        // The bytes per unit over the second half of the warm-up, once the JIT compiled the loop.
        Thread.sleep(WARMUP_SECS * 500);
        long bytes0 = allocated(mx, workers);
        long units0 = units(workers);
        Thread.sleep(WARMUP_SECS * 500);
        long perUnit = (allocated(mx, workers) - bytes0) / Math.max(1, units(workers) - units0);
        System.out.println("READY");
        System.out.println("BYTES_PER_UNIT " + perUnit);
        System.out.flush();
        long start = System.nanoTime();
        long next = start;
        while (seconds < 0 || System.nanoTime() - start < seconds * 1_000_000_000L) {
            System.out.println("WORK " + System.nanoTime() + " " + units(workers));
            System.out.flush();
            next += REPORT_NANOS;
            long sleep = next - System.nanoTime();
            if (sleep > 0) {
                Thread.sleep(sleep / 1_000_000, (int) (sleep % 1_000_000));
            }
        }
    }
}

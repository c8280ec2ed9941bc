package bench;

/**
 * Time in HotSpot's arraycopy stubs: the worker thread {@code copy-worker} copies
 * {@code short[]} and {@code byte[]} arrays of 64 KiB with {@link System#arraycopy} in
 * {@link #copyShorts} and {@link #copyBytes}, which C2 compiles into calls to the
 * {@code jshort_disjoint_arraycopy} / {@code jbyte_disjoint_arraycopy} StubRoutines (and their
 * arrayof_ variants). Most samples land in the stubs, with the copying method as their caller.
 *
 * <p>Run with {@code java -cp target/bench-apps/classes bench.ArrayCopy [seconds]}. Prints
 * {@code READY} after 2 s of warm-up.
 */
public final class ArrayCopy {
    static final int SIZE = 64 * 1024;

    static volatile long sink;

    private ArrayCopy() {}

    static void copyShorts(short[] from, short[] to) {
        for (int i = 0; i < 8; i++) {
            System.arraycopy(from, i, to, 0, from.length - i);
        }
    }

    static void copyBytes(byte[] from, byte[] to) {
        for (int i = 0; i < 8; i++) {
            System.arraycopy(from, i, to, 0, from.length - i);
        }
    }

    public static void main(String[] args) throws Exception {
        Thread worker =
                new Thread(
                        () -> {
                            short[] s1 = new short[SIZE / 2];
                            short[] s2 = new short[SIZE / 2];
                            byte[] b1 = new byte[SIZE];
                            byte[] b2 = new byte[SIZE];
                            for (int i = 0; i < b1.length; i++) {
                                b1[i] = (byte) i;
                            }
                            long n = 0;
                            while (true) {
                                copyShorts(s1, s2);
                                copyBytes(b1, b2);
                                s1[(int) (n % s1.length)] = (short) n;
                                sink = s2[7] + b2[7] + n++;
                            }
                        },
                        "copy-worker");
        worker.setDaemon(true);
        worker.start();
        Thread.sleep(2000);
        System.out.println("READY");
        System.out.flush();
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 3600;
        Thread.sleep(seconds * 1000);
    }
}

package bench;

/**
 * A JVM stuck before a safepoint. Thread {@code spinner} runs {@link #spin}, a nested counted
 * loop that C2 compiles without safepoint polls when the JVM runs with
 * {@code -XX:-UseCountedLoopSafepoints -XX:LoopStripMiningIter=0}; thread {@code gc-caller} then
 * calls {@code System.gc()}, whose safepoint waits for the spinner forever. From then on every
 * Java thread that needs the VM blocks: jstack, jcmd and attach hang.
 *
 * <p>Prints {@code READY} once {@link #spin} is compiled, {@code STUCK} right before the
 * {@code System.gc()} call (the spinner is inside its endless call by then).
 */
public final class Stuck {
    static volatile long sink;

    private Stuck() {}

    /** About {@code outer * inner} steps with no safepoint poll inside either loop. */
    static long spin(int outer, int inner) {
        long acc = 17;
        for (int i = 0; i < outer; i++) {
            for (int j = 0; j < inner; j++) {
                acc = acc * 31 + (j ^ i);
            }
        }
        return acc;
    }

    public static void main(String[] args) throws Exception {
        // Enough short calls for C2 to compile spin as a whole method (not only OSR).
        for (int k = 0; k < 20_000; k++) {
            sink = spin(2, 500);
        }
        Thread.sleep(1000);
        System.out.println("READY");
        System.out.flush();
        Thread spinner = new Thread(() -> sink = spin(Integer.MAX_VALUE, Integer.MAX_VALUE), "spinner");
        spinner.setDaemon(true);
        spinner.start();
        Thread gcCaller = new Thread(() -> {
            try {
                Thread.sleep(500);
            } catch (InterruptedException e) {
                return;
            }
            System.out.println("STUCK");
            System.out.flush();
            System.gc();
        }, "gc-caller");
        gcCaller.start();
        gcCaller.join();
        System.out.println("the safepoint was reached after all");
        System.exit(1);
    }
}

package bench;

import java.util.function.IntSupplier;
import java.util.function.IntUnaryOperator;

/**
 * Template class for {@link CodeChurn}. Never used directly: CodeChurn reads this class file from
 * the classpath and defines a fresh copy of it (by default renamed to {@code
 * bench.CodeChurnPayloadNNNNN}, same name length) in a new throwaway class loader each iteration.
 *
 * <p>Only depends on java.base, so any parent loader works.
 */
public final class CodeChurnPayload00000 implements IntSupplier, IntUnaryOperator {
    /** Training data: only Integers, so {@link #shape}'s type profile sees exactly one class. */
    private static final Object[] INTS = new Object[64];
    /** Mixed data: Strings hit the branch C2 pruned while training, i.e. an uncommon trap. */
    private static final Object[] MIXED = new Object[64];

    static {
        for (int i = 0; i < INTS.length; i++) {
            INTS[i] = Integer.valueOf(i * 7919);
            MIXED[i] = (i % 4 == 3) ? ("s" + i) : Integer.valueOf(i * 31);
        }
    }

    private int state;

    public CodeChurnPayload00000() {
        state = System.identityHashCode(this) | 1;
    }

    /** The hot method: a short arithmetic loop, called often enough to reach C2. */
    @Override
    public int getAsInt() {
        int acc = state;
        for (int i = 0; i < 48; i++) {
            acc = mix(acc, i);
        }
        state = acc;
        return acc;
    }

    private static int mix(int a, int i) {
        int x = a * 0x9E3779B1 + i;
        x ^= x >>> 15;
        return x * 0x85EBCA6B;
    }

    /**
     * Deoptimization trigger. mode 0 trains {@link #shape} with Integers only; mode != 0 feeds it
     * Strings, hitting an uncommon trap in its C2 code, which is then made not entrant.
     */
    @Override
    public int applyAsInt(int mode) {
        Object[] data = mode == 0 ? INTS : MIXED;
        int acc = 0;
        for (int i = 0; i < data.length; i++) {
            acc += shape(data[i]);
        }
        return acc;
    }

    static int shape(Object o) {
        if (o instanceof Integer) {
            return ((Integer) o).intValue() * 3 + 1;
        }
        // Never taken while training: C2 compiles this as an unstable_if uncommon trap.
        return o.hashCode() ^ 0x5BD1E995;
    }
}

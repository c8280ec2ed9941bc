package bench;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.function.IntSupplier;
import java.util.function.IntUnaryOperator;

/**
 * Code-cache churn: makes the JIT allocate, invalidate and free nmethods continuously so that code
 * cache addresses get reused by different methods.
 *
 * <p>Each iteration reads the class file of {@link CodeChurnPayload00000} from the classpath,
 * defines a fresh copy in a new throwaway class loader (renamed to {@code
 * bench.CodeChurnPayloadNNNNN}, NNNNN = iteration mod 100000, unless {@code --same-name}), calls its
 * hot method {@code getAsInt()} until it is C1- and C2-compiled, trains {@code shape(Object)} with
 * Integers only and then feeds it Strings (uncommon trap, nmethod made not entrant), and drops the
 * loader. Every {@code --gc-every} iterations it calls {@code System.gc()} so that the classes unload
 * and their nmethods are freed. The call sites in {@link #churnOnce} see a new receiver class every
 * iteration, so they also go megamorphic (one more deoptimization early on).
 *
 * <p>Usage: {@code java -XX:ReservedCodeCacheSize=16m -XX:+UseSerialGC -cp
 * target/bench-apps/classes bench.CodeChurn [seconds] [--same-name] [--gc-every N] [--slice-ms M]}
 *
 * <p>Prints {@code READY} after the first class-unloading GC (~1 s), then {@code CHURN
 * <iterations> <System.nanoTime()>} every second.
 */
public final class CodeChurn {
    static final String TEMPLATE = "bench/CodeChurnPayload00000";
    static volatile long sink;

    private CodeChurn() {}

    /** A class loader that defines exactly one class and is then thrown away. */
    static final class OneShotLoader extends ClassLoader {
        OneShotLoader(ClassLoader parent) {
            super(parent);
        }

        Class<?> define(String binaryName, byte[] bytes) {
            return defineClass(binaryName, bytes, 0, bytes.length);
        }
    }

    static byte[] readTemplate() throws IOException {
        try (InputStream in = CodeChurn.class.getResourceAsStream("/" + TEMPLATE + ".class")) {
            if (in == null) {
                throw new IOException("class file " + TEMPLATE + ".class not on the classpath");
            }
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            byte[] buf = new byte[4096];
            int n;
            while ((n = in.read(buf)) > 0) {
                out.write(buf, 0, n);
            }
            return out.toByteArray();
        }
    }

    /**
     * Replaces every occurrence of the template's internal name with a new name of the same length.
     * Equal lengths keep the constant pool's UTF-8 entries valid.
     */
    static byte[] rename(byte[] template, String newInternalName) {
        byte[] from = TEMPLATE.getBytes(StandardCharsets.UTF_8);
        byte[] to = newInternalName.getBytes(StandardCharsets.UTF_8);
        if (from.length != to.length) {
            throw new IllegalArgumentException("name length mismatch: " + newInternalName);
        }
        byte[] out = template.clone();
        outer:
        for (int i = 0; i + from.length <= out.length; i++) {
            for (int j = 0; j < from.length; j++) {
                if (out[i + j] != from[j]) {
                    continue outer;
                }
            }
            System.arraycopy(to, 0, out, i, to.length);
            i += from.length - 1;
        }
        return out;
    }

    /** One loader lifetime: define, JIT-compile, deoptimize, drop. */
    static void churnOnce(byte[] template, long iter, boolean sameName, long sliceNanos)
            throws ReflectiveOperationException {
        String internal = sameName ? TEMPLATE : String.format("bench/CodeChurnPayload%05d", iter % 100_000);
        byte[] bytes = sameName ? template : rename(template, internal);
        OneShotLoader loader = new OneShotLoader(CodeChurn.class.getClassLoader());
        Class<?> cls = loader.define(internal.replace('/', '.'), bytes);
        Object payload = cls.getDeclaredConstructor().newInstance();
        IntSupplier hot = (IntSupplier) payload;
        IntUnaryOperator deopt = (IntUnaryOperator) payload;

        long acc = 0;
        long deadline = System.nanoTime() + sliceNanos;
        int rounds = 0;
        // Enough calls for tier 3 and tier 4 compiles (Tier4InvocationThreshold=5000 plus back-edges),
        // and keep going for the time slice so the background compiles can finish and get used.
        while (rounds < 12_000 || System.nanoTime() < deadline) {
            for (int k = 0; k < 16; k++) {
                acc += hot.getAsInt();
            }
            acc += deopt.applyAsInt(0);
            rounds++;
        }
        // Change the type profile: uncommon trap in shape(), its nmethod is made not entrant.
        for (int k = 0; k < 200; k++) {
            acc += deopt.applyAsInt(1);
        }
        sink += acc;
    }

    public static void main(String[] args) throws Exception {
        double seconds = -1;
        boolean sameName = false;
        int gcEvery = 10;
        long sliceMs = 25;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--same-name":
                    sameName = true;
                    break;
                case "--gc-every":
                    gcEvery = Integer.parseInt(args[++i]);
                    break;
                case "--slice-ms":
                    sliceMs = Long.parseLong(args[++i]);
                    break;
                default:
                    seconds = Double.parseDouble(args[i]);
            }
        }
        byte[] template = readTemplate();
        long start = System.nanoTime();
        long readyAt = -1;
        long nextReport = 0;
        for (long iter = 0; ; iter++) {
            churnOnce(template, iter, sameName, sliceMs * 1_000_000L);
            if ((iter + 1) % gcEvery == 0) {
                System.gc();
                long now = System.nanoTime();
                if (readyAt < 0 && now - start > 1_000_000_000L) {
                    readyAt = now;
                    nextReport = now + 1_000_000_000L;
                    System.out.println("READY");
                    System.out.flush();
                }
            }
            long now = System.nanoTime();
            if (readyAt >= 0) {
                if (now >= nextReport) {
                    System.out.println("CHURN " + (iter + 1) + " " + now);
                    System.out.flush();
                    nextReport += 1_000_000_000L;
                }
                if (seconds >= 0 && now - readyAt >= (long) (seconds * 1e9)) {
                    return;
                }
            }
        }
    }
}

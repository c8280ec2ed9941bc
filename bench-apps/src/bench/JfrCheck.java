package bench;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import jdk.jfr.consumer.RecordedEvent;
import jdk.jfr.consumer.RecordedFrame;
import jdk.jfr.consumer.RecordedMethod;
import jdk.jfr.consumer.RecordedThread;
import jdk.jfr.consumer.RecordingFile;

/**
 * Reads a JFR recording with the JDK's own parser ({@link RecordingFile}) and checks it against
 * the collapsed stacks of the same recording.
 *
 * <pre>
 *   java -cp target/bench-apps/classes bench.JfrCheck profile.jfr profile.collapsed thread-name
 * </pre>
 *
 * <p>Folds the stacks of {@code jdk.ExecutionSample} and {@code profiler.WallClockSample} events
 * (leaf last, Java frames suffixed by their frame type: {@code _[j]} JIT compiled, {@code _[1]}
 * C1 compiled, {@code _[i]} inlined, {@code _[0]} interpreted, {@code _[k]} kernel) and requires
 * them to equal the collapsed file's lines; requires event times never to go back, an inlined frame
 * called from a JIT-compiled one, an interpreted frame, a native frame of libjvm.so, and a sample
 * of a thread of the given name. Prints {@code FRAME <label> <line> <bci>} for each distinct Java
 * frame, then {@code JFRCHECK OK <events>}; exits 1 with the reason otherwise.
 */
public final class JfrCheck {
    private JfrCheck() {}

    static String suffix(String type) {
        switch (type) {
            case "Interpreted":
                return "_[0]";
            case "JIT compiled":
                return "_[j]";
            case "C1 compiled":
                return "_[1]";
            case "Inlined":
                return "_[i]";
            default:
                return null;
        }
    }

    /** A hidden class's name as the JVM prints it: {@code Outer$$Lambda$14/0x0000000800c03000}. */
    static String className(String name) {
        return name.replaceFirst("\\.(0x[0-9a-f]+)$", "/$1");
    }

    static String label(RecordedFrame f) {
        RecordedMethod m = f.getMethod();
        String type = f.getType();
        String javaSuffix = suffix(type);
        String name;
        if (javaSuffix != null) {
            // A frame of no known method (jvmperf's [unknown Method*]) has no class.
            String cls = className(m.getType().getName());
            name = (cls.isEmpty() ? "" : cls + ".") + m.getName() + javaSuffix;
        } else if ("Kernel".equals(type)) {
            name = m.getName() + "_[k]";
        } else if ("()L;".equals(m.getDescriptor())) {
            name = m.getName();
        } else {
            name = className(m.getType().getName()) + "." + m.getName();
        }
        return name.replace(';', ':').replace('\n', ':');
    }

    static void fail(String why) {
        System.out.println("JFRCHECK FAILED " + why);
        System.exit(1);
    }

    public static void main(String[] args) throws IOException {
        Path recording = Paths.get(args[0]);
        Map<String, Long> expected = new TreeMap<>();
        for (String line : Files.readAllLines(Paths.get(args[1]), StandardCharsets.UTF_8)) {
            if (line.isEmpty()) {
                continue;
            }
            int space = line.lastIndexOf(' ');
            expected.merge(line.substring(0, space), Long.parseLong(line.substring(space + 1)), Long::sum);
        }
        String threadName = args[2];

        Map<String, Long> folded = new TreeMap<>();
        TreeSet<String> javaFrames = new TreeSet<>();
        boolean inlinedInJit = false;
        boolean interpreted = false;
        boolean libjvm = false;
        boolean thread = false;
        Instant last = Instant.MIN;
        long events = 0;
        try (RecordingFile file = new RecordingFile(recording)) {
            while (file.hasMoreEvents()) {
                RecordedEvent e = file.readEvent();
                String type = e.getEventType().getName();
                if (!type.equals("jdk.ExecutionSample") && !type.equals("profiler.WallClockSample")) {
                    continue;
                }
                events++;
                if (e.getStartTime().isBefore(last)) {
                    fail("event time " + e.getStartTime() + " before " + last);
                }
                last = e.getStartTime();
                RecordedThread t = e.getThread("sampledThread");
                thread |= threadName.equals(t.getJavaName()) && threadName.equals(t.getOSName());
                long weight = e.hasField("samples") ? e.getInt("samples") : 1;
                List<RecordedFrame> frames = e.getStackTrace().getFrames();
                StringBuilder stack = new StringBuilder();
                for (int i = frames.size() - 1; i >= 0; i--) {
                    RecordedFrame f = frames.get(i);
                    String label = label(f);
                    if (stack.length() > 0) {
                        stack.append(';');
                    }
                    stack.append(label);
                    String ft = f.getType();
                    if (suffix(ft) != null) {
                        javaFrames.add(label + " " + f.getLineNumber() + " " + f.getBytecodeIndex());
                    }
                    interpreted |= ft.equals("Interpreted") && f.getLineNumber() > 0;
                    inlinedInJit |= ft.equals("Inlined")
                            && i + 1 < frames.size()
                            && frames.get(i + 1).getType().equals("JIT compiled");
                    libjvm |= ft.equals("Native") && "libjvm.so".equals(f.getMethod().getType().getName());
                }
                folded.merge(stack.toString(), weight, Long::sum);
            }
        }
        if (!folded.equals(expected)) {
            for (Map.Entry<String, Long> en : folded.entrySet()) {
                if (!en.getValue().equals(expected.get(en.getKey()))) {
                    fail("JFR has " + en.getValue() + " of " + en.getKey() + ", collapsed "
                            + expected.get(en.getKey()));
                }
            }
            fail("collapsed has stacks the JFR lacks: " + expected.size() + " vs " + folded.size());
        }
        if (!inlinedInJit) {
            fail("no inlined frame called from a JIT-compiled one");
        }
        if (!interpreted) {
            fail("no interpreted frame with a line number");
        }
        if (!libjvm) {
            fail("no native frame of libjvm.so");
        }
        if (!thread) {
            fail("no sample of thread " + threadName);
        }
        for (String f : javaFrames) {
            System.out.println("FRAME " + f);
        }
        System.out.println("JFRCHECK OK " + events);
    }
}

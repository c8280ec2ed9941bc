package bench;

import java.io.IOException;
import java.nio.file.Paths;
import java.util.Map;
import java.util.TreeMap;
import jdk.jfr.consumer.RecordedEvent;
import jdk.jfr.consumer.RecordedFrame;
import jdk.jfr.consumer.RecordedMethod;
import jdk.jfr.consumer.RecordedThread;
import jdk.jfr.consumer.RecordingFile;

/**
 * Counts the samples of one thread in a JFR recording with the JDK's own parser ({@link
 * RecordingFile}): its {@code jdk.ExecutionSample} and {@code jdk.NativeMethodSample} events, in
 * all and those with a given method anywhere on their stack.
 *
 * <pre>
 *   java -cp target/bench-apps/classes bench.JfrSamples recording.jfr thread-name Class.method...
 * </pre>
 *
 * <p>Prints {@code SAMPLES <event type> <events>} for each event type with samples of the thread
 * (by its Java name), then {@code METHOD <event type> <Class.method> <events>} for each method.
 */
public final class JfrSamples {
    private JfrSamples() {}

    static boolean onStack(RecordedEvent e, String method) {
        if (e.getStackTrace() == null) {
            return false;
        }
        for (RecordedFrame f : e.getStackTrace().getFrames()) {
            RecordedMethod m = f.getMethod();
            if (method.equals(m.getType().getName() + "." + m.getName())) {
                return true;
            }
        }
        return false;
    }

    public static void main(String[] args) throws IOException {
        String thread = args[1];
        Map<String, Long> samples = new TreeMap<>();
        Map<String, Long> byMethod = new TreeMap<>();
        try (RecordingFile file = new RecordingFile(Paths.get(args[0]))) {
            while (file.hasMoreEvents()) {
                RecordedEvent e = file.readEvent();
                String type = e.getEventType().getName();
                if (!type.equals("jdk.ExecutionSample") && !type.equals("jdk.NativeMethodSample")) {
                    continue;
                }
                RecordedThread t = e.getThread("sampledThread");
                if (t == null || !thread.equals(t.getJavaName())) {
                    continue;
                }
                samples.merge(type, 1L, Long::sum);
                for (int i = 2; i < args.length; i++) {
                    byMethod.merge(type + " " + args[i], onStack(e, args[i]) ? 1L : 0L, Long::sum);
                }
            }
        }
        samples.forEach((type, n) -> System.out.println("SAMPLES " + type + " " + n));
        byMethod.forEach((key, n) -> System.out.println("METHOD " + key + " " + n));
    }
}

package bench;

import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;

/**
 * Maps its own {@code lib/server/libjvm.so} read-only from offset 0, as tools that parse ELF
 * files in the JVM do (async-profiler's {@code ElfParser::parseFile} maps libjvm.so while it
 * starts), so {@code /proc/<pid>/maps} lists a second, non-executable mapping of libjvm at file
 * offset 0, normally below the loaded image. Then idles.
 *
 * <p>Run with {@code java -cp target/bench-apps/classes bench.MapsLibjvm [seconds]}. Prints
 * {@code READY} once the mapping exists.
 */
public final class MapsLibjvm {
    /** Kept reachable so the mapping stays. */
    static MappedByteBuffer mapping;

    private MapsLibjvm() {}

    public static void main(String[] args) throws Exception {
        Path libjvm = Paths.get(System.getProperty("java.home"), "lib", "server", "libjvm.so");
        try (FileChannel file = FileChannel.open(libjvm, StandardOpenOption.READ)) {
            mapping = file.map(FileChannel.MapMode.READ_ONLY, 0, file.size());
        }
        if (mapping.get(1) != 'E') {
            throw new IllegalStateException(libjvm + " is not an ELF file");
        }
        System.out.println("READY");
        System.out.flush();
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 3600;
        Thread.sleep(seconds * 1000);
    }
}

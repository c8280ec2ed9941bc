package bench;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.locks.ReentrantLock;

/**
 * A Java-level deadlock and a park, for {@code jvmperf dump}: thread {@code left} holds the monitor
 * of a {@link Left} and waits for that of a {@link Right}, which thread {@code right} holds while
 * it waits for the {@code Left}; thread {@code parker} parks for a {@code ReentrantLock} that the
 * main thread holds. Prints {@code READY} once all three wait; runs until killed.
 */
public final class Deadlock {
    private Deadlock() {}

    static final class Left {}

    static final class Right {}

    static final Left LEFT = new Left();
    static final Right RIGHT = new Right();
    static final ReentrantLock LOCK = new ReentrantLock();

    static Thread start(String name, Object first, Object second, CountDownLatch both) {
        Thread t =
                new Thread(
                        () -> {
                            synchronized (first) {
                                both.countDown();
                                try {
                                    both.await();
                                } catch (InterruptedException e) {
                                    return;
                                }
                                synchronized (second) {
                                    System.out.println("unreachable");
                                }
                            }
                        },
                        name);
        t.setDaemon(true);
        t.start();
        return t;
    }

    public static void main(String[] args) throws InterruptedException {
        CountDownLatch both = new CountDownLatch(2);
        Thread left = start("left", LEFT, RIGHT, both);
        Thread right = start("right", RIGHT, LEFT, both);
        LOCK.lock();
        Thread parker = new Thread(LOCK::lock, "parker");
        parker.setDaemon(true);
        parker.start();
        while (left.getState() != Thread.State.BLOCKED
                || right.getState() != Thread.State.BLOCKED
                || parker.getState() != Thread.State.WAITING) {
            Thread.sleep(10);
        }
        System.out.println("READY");
        System.out.flush();
        Thread.sleep(Long.MAX_VALUE);
    }
}

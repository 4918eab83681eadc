package io.rdq.postgres;

import java.util.LinkedHashSet;
import java.util.Set;
import java.util.function.Consumer;

/**
 * Sends "a task of queue X may be due" notifications after the statements that made tasks due,
 * off the caller's path and coalesced: queues announced while a notification is being sent go
 * out together in the next one. An enqueue may carry its own notification instead
 * ({@link #tryCarry}) while nothing else is being announced: one notifying transaction of the
 * store at a time, as PostgreSQL serialises their commits on a global lock.
 */
final class Announcer implements AutoCloseable {
    private final Consumer<Set<String>> send;
    private final Set<String> pending = new LinkedHashSet<>();
    private final Thread thread;
    private boolean closed;
    private boolean sending;
    private boolean carrying;

    Announcer(Consumer<Set<String>> send) {
        this.send = send;
        this.thread = new Thread(this::loop, "rdq-announcer");
        this.thread.setDaemon(true);
        this.thread.start();
    }

    synchronized void announce(String queue) {
        if (pending.add(queue)) {
            notifyAll();
        }
    }

    /**
     * Whether the enqueue about to run may notify inside its own transaction: true when nothing
     * is pending or being sent and no other enqueue carries one. Each true must be followed by
     * {@link #carried}; until then the announcer's own notifications wait.
     */
    synchronized boolean tryCarry() {
        if (closed || sending || carrying || !pending.isEmpty()) {
            return false;
        }
        carrying = true;
        return true;
    }

    /** The enqueue that {@link #tryCarry} let carry its notification has ended. */
    synchronized void carried() {
        carrying = false;
        notifyAll();
    }

    private void loop() {
        while (true) {
            Set<String> batch;
            synchronized (this) {
                while ((pending.isEmpty() || carrying) && !closed) {
                    try {
                        wait();
                    } catch (InterruptedException e) {
                        return;
                    }
                }
                if (closed) {
                    return;
                }
                batch = new LinkedHashSet<>(pending);
                pending.clear();
                sending = true;
            }
            try {
                send.accept(batch);
            } catch (RuntimeException ignored) {
                // a lost wake-up is harmless: idle workers also poll
            } finally {
                synchronized (this) {
                    sending = false;
                }
            }
        }
    }

    @Override
    public synchronized void close() {
        closed = true;
        notifyAll();
    }
}

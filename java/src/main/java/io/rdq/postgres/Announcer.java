package io.rdq.postgres;

import java.util.LinkedHashSet;
import java.util.Set;
import java.util.function.Consumer;

/**
 * Sends "a task of queue X may be due" notifications after the statements that made tasks due,
 * off the caller's path and coalesced: queues announced while a notification is being sent go
 * out together in the next one.
 */
final class Announcer implements AutoCloseable {
    private final Consumer<Set<String>> send;
    private final Set<String> pending = new LinkedHashSet<>();
    private final Thread thread;
    private boolean closed;

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

    private void loop() {
        while (true) {
            Set<String> batch;
            synchronized (this) {
                while (pending.isEmpty() && !closed) {
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
            }
            try {
                send.accept(batch);
            } catch (RuntimeException ignored) {
                // a lost wake-up is harmless: idle workers also poll
            }
        }
    }

    @Override
    public synchronized void close() {
        closed = true;
        notifyAll();
    }
}

package io.rdq.postgres;

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CompletableFuture;
import org.postgresql.PGConnection;
import org.postgresql.PGNotification;

/**
 * One LISTEN connection per store, opened on the first {@code waitDue}: a thread reads the
 * channel's notifications (each names a queue) and completes the futures of that queue's
 * waiters.
 */
final class DueListener implements AutoCloseable {
    private final String url;
    private final Properties properties;
    private final String channel;
    private final Map<String, List<CompletableFuture<Boolean>>> waiters = new HashMap<>();
    private Connection conn;
    private Thread thread;
    private boolean closed;

    DueListener(String url, Properties properties, String channel) {
        this.url = url;
        this.properties = properties;
        this.channel = channel;
    }

    /** Start listening unless already listening. */
    synchronized void ensure() throws SQLException {
        if (closed) {
            throw new SQLException("the store is closed", "08003");
        }
        if (thread != null && thread.isAlive()) {
            return;
        }
        conn = DriverManager.getConnection(url, properties);
        try (Statement st = conn.createStatement()) {
            st.execute("LISTEN \"" + channel + "\"");
        }
        Connection listening = conn;
        thread = new Thread(() -> loop(listening), "rdq-listener");
        thread.setDaemon(true);
        thread.start();
    }

    synchronized CompletableFuture<Boolean> register(String queue) {
        CompletableFuture<Boolean> future = new CompletableFuture<>();
        waiters.computeIfAbsent(queue, q -> new ArrayList<>()).add(future);
        return future;
    }

    synchronized void unregister(String queue, CompletableFuture<Boolean> future) {
        List<CompletableFuture<Boolean>> list = waiters.get(queue);
        if (list != null) {
            list.remove(future);
            if (list.isEmpty()) {
                waiters.remove(queue);
            }
        }
    }

    private void loop(Connection listening) {
        try {
            PGConnection pg = listening.unwrap(PGConnection.class);
            while (!Thread.currentThread().isInterrupted()) {
                PGNotification[] notes = pg.getNotifications(500);
                if (notes == null) {
                    continue;
                }
                for (PGNotification note : notes) {
                    wake(note.getParameter());
                }
            }
        } catch (SQLException e) {
            // the connection is gone: wake everyone (a spurious wake-up is allowed) and let
            // the next waitDue open a new one
            wakeAll();
        } finally {
            synchronized (this) {
                if (conn == listening) {
                    conn = null;
                    thread = null;
                }
            }
            ConnectionPool.quietlyClose(listening);
        }
    }

    private synchronized void wake(String queue) {
        List<CompletableFuture<Boolean>> list = waiters.remove(queue);
        if (list != null) {
            list.forEach(f -> f.complete(true));
        }
    }

    private synchronized void wakeAll() {
        waiters.values().forEach(list -> list.forEach(f -> f.complete(true)));
        waiters.clear();
    }

    @Override
    public void close() {
        Thread running;
        synchronized (this) {
            closed = true;
            running = thread;
            thread = null;
        }
        if (running != null) {
            running.interrupt();
        }
        wakeAll();
    }

    synchronized void reopen() {
        closed = false;
    }
}

package io.rdq.postgres;

import io.rdq.StorageUnavailableException;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

/**
 * A small pool of autocommit connections: what the store needs and nothing more. Idle
 * connections are reused last-in first-out; new ones are opened up to {@code max} on demand;
 * a connection that failed is dropped. Waiting for a connection is bounded by the operation
 * timeout.
 */
final class ConnectionPool implements AutoCloseable {
    private final String url;
    private final Properties properties;
    private final int max;
    private final long waitNanos;
    private final String endpoint;
    private final Deque<Connection> idle = new ArrayDeque<>();
    private int open;
    private boolean closed;

    ConnectionPool(String url, Properties properties, int max, double waitSeconds, String endpoint) {
        this.url = url;
        this.properties = properties;
        this.max = max;
        this.waitNanos = (long) (waitSeconds * 1e9);
        this.endpoint = endpoint;
    }

    Connection acquire() throws SQLException {
        long deadline = System.nanoTime() + waitNanos;
        synchronized (this) {
            while (true) {
                if (closed) {
                    throw new SQLException("the connection pool is closed", "08003");
                }
                Connection conn = idle.pollLast();
                if (conn != null) {
                    return conn;
                }
                if (open < max) {
                    open++;
                    break;
                }
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    throw new StorageUnavailableException("PostgreSQL at " + endpoint + " is unavailable: no connection free within the operation timeout");
                }
                try {
                    TimeUnit.NANOSECONDS.timedWait(this, left);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new SQLException("interrupted while waiting for a connection", "08000", e);
                }
            }
        }
        try {
            Connection conn = DriverManager.getConnection(url, properties);
            conn.setAutoCommit(true);
            return conn;
        } catch (SQLException | RuntimeException e) {
            synchronized (this) {
                open--;
                notifyAll();
            }
            throw e;
        }
    }

    void release(Connection conn, boolean broken) {
        boolean keep;
        synchronized (this) {
            keep = !broken && !closed;
            if (keep) {
                try {
                    keep = !conn.isClosed() && conn.getAutoCommit();
                } catch (SQLException e) {
                    keep = false;
                }
            }
            if (keep) {
                idle.addLast(conn);
            } else {
                open--;
            }
            notifyAll();
        }
        if (!keep) {
            quietlyClose(conn);
        }
    }

    /** Drop every idle connection (the server went away: they are dead too). */
    void expire() {
        Deque<Connection> dropped;
        synchronized (this) {
            dropped = new ArrayDeque<>(idle);
            open -= idle.size();
            idle.clear();
            notifyAll();
        }
        dropped.forEach(ConnectionPool::quietlyClose);
    }

    @Override
    public void close() {
        Deque<Connection> dropped;
        synchronized (this) {
            closed = true;
            dropped = new ArrayDeque<>(idle);
            open -= idle.size();
            idle.clear();
            notifyAll();
        }
        dropped.forEach(ConnectionPool::quietlyClose);
    }

    static void quietlyClose(Connection conn) {
        try {
            conn.close();
        } catch (SQLException ignored) {
            // closing a dead connection: nothing to do
        }
    }
}

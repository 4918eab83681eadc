package io.rdq.worker;

import java.time.Duration;

/** Thrown by a handler to retry after {@code delay} instead of the backoff's delay; the
 * attempt still counts toward {@code maxAttempts}. */
public class RetryAfterException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final Duration delay;

    public RetryAfterException(Duration delay, String message) {
        super(message == null ? "retry after " + delay.toMillis() / 1000.0 + "s" : message);
        if (delay.isNegative()) {
            throw new IllegalArgumentException("RetryAfter delay must not be negative");
        }
        this.delay = delay;
    }

    public RetryAfterException(Duration delay) {
        this(delay, null);
    }

    public Duration delay() {
        return delay;
    }
}

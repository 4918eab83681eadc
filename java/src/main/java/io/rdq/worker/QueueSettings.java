package io.rdq.worker;

import io.rdq.ConfigException;
import io.rdq.Limits;
import io.rdq.RetryOverride;
import java.time.Duration;
import java.util.List;

/**
 * How a queue's tasks are run and retried: the same settings and defaults as rdq's Python
 * {@code QueueConfig}. {@code maxAttempts} counts every attempt (the first one included);
 * {@code timeout} bounds one handler call; {@code lease} is the claim lease, extended every
 * {@code heartbeat} while a handler runs (default a third of the lease); {@code concurrency}
 * bounds the handlers run at once; {@code nonRetryable} exception types dead-letter a task at
 * once; {@code keepSucceeded} false deletes a task as its success is recorded (rdq's
 * {@code keep_succeeded = false}: the store needs {@code discardSucceeded}).
 */
public record QueueSettings(
        int maxAttempts,
        Backoff backoff,
        Duration timeout,
        Duration lease,
        Duration heartbeat,
        int concurrency,
        List<Class<? extends Throwable>> nonRetryable,
        boolean keepSucceeded) {

    /** The defaults of rdq's Python engine. */
    public static final QueueSettings DEFAULTS = new QueueSettings(
            5, Backoff.exponential(1.0, 300.0), Duration.ofSeconds(60), Duration.ofSeconds(30), null, 10, List.of(), true);

    /** Settings that keep succeeded tasks (as before {@code keepSucceeded}). */
    public QueueSettings(int maxAttempts, Backoff backoff, Duration timeout, Duration lease, Duration heartbeat,
            int concurrency, List<Class<? extends Throwable>> nonRetryable) {
        this(maxAttempts, backoff, timeout, lease, heartbeat, concurrency, nonRetryable, true);
    }

    public QueueSettings {
        if (maxAttempts < 1) {
            throw new ConfigException("max_attempts", "must be an integer of at least 1");
        }
        if (backoff == null) {
            throw new ConfigException("backoff", "give a backoff");
        }
        if (timeout == null || timeout.isNegative() || timeout.isZero()) {
            throw new ConfigException("timeout", "must be a positive duration");
        }
        if (lease == null || lease.isNegative() || lease.isZero()) {
            throw new ConfigException("lease", "must be a positive duration");
        }
        if (lease.compareTo(Limits.MAX_LEASE) > 0) {
            throw new ConfigException("lease", "must be at most 24 hours");
        }
        heartbeat = heartbeat == null ? lease.dividedBy(3) : heartbeat;
        if (heartbeat.isNegative() || heartbeat.isZero()) {
            throw new ConfigException("heartbeat", "must be a positive duration");
        }
        if (concurrency < 1 || concurrency > Limits.MAX_LIMIT) {
            throw new ConfigException("concurrency", "must be an integer from 1 to " + Limits.MAX_LIMIT);
        }
        nonRetryable = List.copyOf(nonRetryable);
    }

    public QueueSettings withMaxAttempts(int value) {
        return new QueueSettings(value, backoff, timeout, lease, null, concurrency, nonRetryable, keepSucceeded);
    }

    public QueueSettings withBackoff(Backoff value) {
        return new QueueSettings(maxAttempts, value, timeout, lease, heartbeat, concurrency, nonRetryable, keepSucceeded);
    }

    public QueueSettings withTimeout(Duration value) {
        return new QueueSettings(maxAttempts, backoff, value, lease, heartbeat, concurrency, nonRetryable, keepSucceeded);
    }

    /** A new lease; the heartbeat goes back to a third of it. */
    public QueueSettings withLease(Duration value) {
        return new QueueSettings(maxAttempts, backoff, timeout, value, null, concurrency, nonRetryable, keepSucceeded);
    }

    public QueueSettings withHeartbeat(Duration value) {
        return new QueueSettings(maxAttempts, backoff, timeout, lease, value, concurrency, nonRetryable, keepSucceeded);
    }

    public QueueSettings withConcurrency(int value) {
        return new QueueSettings(maxAttempts, backoff, timeout, lease, heartbeat, value, nonRetryable, keepSucceeded);
    }

    public QueueSettings withNonRetryable(List<Class<? extends Throwable>> value) {
        return new QueueSettings(maxAttempts, backoff, timeout, lease, heartbeat, concurrency, value, keepSucceeded);
    }

    /** Whether a succeeded task is kept (true, the default) or deleted as it completes. */
    public QueueSettings withKeepSucceeded(boolean value) {
        return new QueueSettings(maxAttempts, backoff, timeout, lease, heartbeat, concurrency, nonRetryable, value);
    }

    /**
     * The settings a task runs under: its own {@code override} applied over these, as rdq's
     * Python engine resolves it. Override values that are invalid are ignored (the queue's
     * value stays): a bad override written by a producer never stops a task from being run.
     */
    public QueueSettings resolve(RetryOverride override) {
        if (override == null) {
            return this;
        }
        int attempts = override.maxAttempts() != null && override.maxAttempts() >= 1 ? override.maxAttempts() : maxAttempts;
        Duration runFor = timeout;
        if (override.timeout() != null && override.timeout() > 0 && Double.isFinite(override.timeout())) {
            runFor = Duration.ofNanos((long) (override.timeout() * 1e9));
        }
        Backoff.Kind kind = backoff.kind();
        Backoff.Kind named = Backoff.Kind.named(override.backoff());
        if (named != null) {
            kind = named;
        }
        double base = seconds(override.base(), backoff.base());
        double cap = seconds(override.cap(), backoff.cap());
        if (kind == Backoff.Kind.FIXED && override.cap() == null) {
            cap = base;
        }
        if (cap < base) {
            cap = base;
        }
        return new QueueSettings(attempts, new Backoff(kind, base, cap), runFor, lease, heartbeat, concurrency, nonRetryable, keepSucceeded);
    }

    private static double seconds(Double value, double otherwise) {
        return value != null && value >= 0 && Double.isFinite(value) ? value : otherwise;
    }
}

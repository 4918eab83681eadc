package io.rdq.worker;

/**
 * Runs one task. Returning normally is success; {@link PermanentException} dead-letters the
 * task at once; {@link RetryAfterException} retries after its delay; any other exception is a
 * failure retried by the queue's backoff until {@code maxAttempts} is used up. A handler is
 * interrupted when its timeout passes or its lease is lost.
 */
@FunctionalInterface
public interface Handler {
    void handle(TaskContext task) throws Exception;
}

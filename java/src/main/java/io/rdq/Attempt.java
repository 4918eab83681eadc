package io.rdq;

import java.time.Instant;
import java.util.Objects;

/**
 * The record of one attempt. Storage appends it unchanged; only a worker writes its contents,
 * except {@code LEASE_EXPIRED} records, which the storage writes itself when it reclaims a
 * lapsed lease. Every field but {@code number} and {@code outcome} may be null.
 */
public record Attempt(
        int number,
        Outcome outcome,
        String errorType,
        String errorMessage,
        Instant startedAt,
        Instant finishedAt,
        String workerId,
        String traceback) {

    public Attempt {
        Objects.requireNonNull(outcome, "outcome");
    }

    /** A successful attempt. */
    public static Attempt succeeded(int number, Instant startedAt, Instant finishedAt, String workerId) {
        return new Attempt(number, Outcome.SUCCEEDED, null, null, startedAt, finishedAt, workerId, null);
    }
}

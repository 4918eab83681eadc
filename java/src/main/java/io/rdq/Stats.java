package io.rdq;

import java.time.Instant;
import java.util.List;

/**
 * A per-queue snapshot taken at {@code asOf} by the storage clock. {@code oldestPendingAge} is
 * how long (seconds) the longest-waiting due PENDING task has been due, or null when none is
 * due. Counts named in {@code estimated} may be estimates (only above
 * {@link Limits#EXACT_COUNT_THRESHOLD}).
 */
public record Stats(
        String queue,
        long pending,
        long inFlight,
        long dlqDepth,
        long succeeded,
        Double oldestPendingAge,
        Instant asOf,
        long cancelled,
        List<String> estimated) {
    public Stats {
        estimated = List.copyOf(estimated);
    }
}

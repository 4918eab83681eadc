package io.rdq;

import java.time.Instant;
import java.util.Objects;

/**
 * Selects tasks of one status for {@link Storage#listTasks}. Tasks are listed by their status
 * time (PENDING by next attempt, IN_FLIGHT by lease expiry, SUCCEEDED by completion, DEAD by
 * dead-lettering, CANCELLED by cancellation), then id; {@code after} (inclusive) and
 * {@code before} (exclusive) bound that time.
 */
public record TaskFilter(Status status, String errorType, String handlerRef, Instant after, Instant before) {
    public TaskFilter {
        Objects.requireNonNull(status, "status");
    }

    public static TaskFilter of(Status status) {
        return new TaskFilter(status, null, null, null, null);
    }
}

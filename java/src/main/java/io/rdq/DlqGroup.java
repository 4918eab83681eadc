package io.rdq;

import java.time.Instant;

/** The DEAD tasks of a queue that share a handler and a last error type. */
public record DlqGroup(
        String handlerRef,
        String errorType,
        long count,
        Instant firstDeadLetteredAt,
        Instant lastDeadLetteredAt) {}

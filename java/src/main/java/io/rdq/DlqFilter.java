package io.rdq;

import java.time.Instant;

/**
 * Selects dead-lettered tasks; every non-null field must match. {@code errorType} matches the
 * error type of the last attempt; {@code deadLetteredAfter} is inclusive and
 * {@code deadLetteredBefore} exclusive.
 */
public record DlqFilter(String errorType, String handlerRef, Instant deadLetteredAfter, Instant deadLetteredBefore) {
    /** The filter that matches every DLQ task of a queue. */
    public static final DlqFilter ALL = new DlqFilter(null, null, null, null);
}

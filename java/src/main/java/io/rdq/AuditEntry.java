package io.rdq;

import java.time.Instant;

/**
 * One operator action as recorded: {@code selector} is the JSON form of what was selected;
 * {@code id} and {@code time} are set by {@link Storage#appendAudit}.
 */
public record AuditEntry(
        String actor,
        String action,
        String queue,
        RawJson selector,
        long count,
        String reason,
        String error,
        String id,
        Instant time) {
    public static AuditEntry of(String actor, String action, String queue, RawJson selector, long count, String reason) {
        return new AuditEntry(actor, action, queue, selector, count, reason, null, null, null);
    }
}

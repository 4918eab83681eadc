package io.rdq;

import java.time.Instant;

/** Selects audit entries; every non-null field must match ({@code after} inclusive,
 * {@code before} exclusive, both on the entry's time). */
public record AuditFilter(String queue, String action, String actor, Instant after, Instant before) {
    public static final AuditFilter ALL = new AuditFilter(null, null, null, null, null);
}

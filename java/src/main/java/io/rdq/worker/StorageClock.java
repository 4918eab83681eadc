package io.rdq.worker;

import java.time.Duration;
import java.time.Instant;

/**
 * An estimate of the storage's clock, learned from the claims it hands out (claim time = lease
 * expiry - lease): the last observed storage time plus monotonic time since. Nothing a worker
 * writes comes from its own wall clock once a claim was seen.
 */
final class StorageClock {
    private Instant base = Instant.now();
    private long baseNanos = System.nanoTime();

    synchronized void observeClaim(Instant leaseExpiresAt, Duration lease, long sentNanos, long receivedNanos) {
        if (leaseExpiresAt != null) {
            base = leaseExpiresAt.minus(lease);
            baseNanos = sentNanos + (receivedNanos - sentNanos) / 2;
        }
    }

    synchronized Instant now() {
        return base.plusNanos(System.nanoTime() - baseNanos);
    }
}

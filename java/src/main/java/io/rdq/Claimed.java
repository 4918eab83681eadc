package io.rdq;

import java.util.Objects;

/**
 * A task handed out by {@link Storage#claimDue} with the fencing token that proves the lease.
 * {@code task().leaseExpiresAt()} is the lease's end by the storage clock; the claim was made
 * at that instant minus the lease.
 */
public record Claimed(Envelope task, String token) {
    public Claimed {
        Objects.requireNonNull(task, "task");
        Objects.requireNonNull(token, "token");
    }
}

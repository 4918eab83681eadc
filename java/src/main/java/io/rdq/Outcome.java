package io.rdq;

/** How one attempt ended. */
public enum Outcome {
    SUCCEEDED,
    FAILED,
    TIMEOUT,
    PERMANENT,
    LEASE_EXPIRED,
    INTERRUPTED
}

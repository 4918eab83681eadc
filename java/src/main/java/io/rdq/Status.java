package io.rdq;

/** Where a task is in its life. */
public enum Status {
    PENDING,
    IN_FLIGHT,
    SUCCEEDED,
    DEAD,
    /** Cancelled by an operator before it succeeded: never runs again; terminal, listable and
     * purgeable like a DEAD task, but not in the DLQ and not redrivable. */
    CANCELLED
}

package io.rdq;

/** How one attempt ended. */
public enum Outcome {
    SUCCEEDED,
    FAILED,
    TIMEOUT,
    PERMANENT,
    LEASE_EXPIRED,
    INTERRUPTED,
    /** The engine rescheduled the attempt because the task's dependency was down: it uses up
     * none of the task's attempts (contract version 3). */
    DEFERRED,
    /** The handler said "not yet" (rdq.Snooze): the engine rescheduled it for the delay it
     * asked, using up none of the task's attempts (contract version 4). */
    SNOOZED
}

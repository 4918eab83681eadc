package io.rdq;

/**
 * What a store offers beyond the operations every store has, and the contract version it
 * implements: the flags of rdq's {@code rdq.spi.Capabilities}, by the same names
 * ({@code notifications} is the contract's {@code notify}: {@link Storage#waitDue} blocks until a
 * task may be due). A worker works without any of the accelerations ({@code notifications},
 * {@code filterPushdown}, {@code batchEnqueue}, {@code batchComplete}, {@code groupPushdown});
 * the others are the features of contract version 2: {@code priorities} (claims take the
 * highest priority first), {@code claimHolder} (claims keep the worker id), {@code cancel},
 * {@code taskListing} ({@link Storage#listTasks}), {@code queueListing}
 * ({@link Storage#listQueues}), {@code importTasks} and {@code audit}
 * ({@link Storage#appendAudit}, {@link Storage#listAudit}); and those of contract version 3:
 * {@code control} (control records that claims honour, {@link Storage#retryNow}),
 * {@code workerRegistry} and {@code counters}; and those of contract version 4:
 * {@code fairShares} and {@code priorityAging} (claims in the order a queue's own control
 * asks for: {@link Control#fair()}, {@link Control#aging()}); and that of contract version 5:
 * {@code retention} ({@link Storage#expireTasks}: exactly the listed finished tasks whose status
 * time is before the cut-off leave the store), {@code dedup} ({@link Storage#admit}: one live
 * task per dedup key) and {@code payloadRefs} ({@link Storage#heldPayloadRefs}: which payload
 * references stored tasks hold) and {@code discardSucceeded}
 * ({@link Storage#complete(String, String, Attempt, boolean)} and {@link Completion#discard()}
 * delete the task instead of keeping it SUCCEEDED: a queue that keeps no succeeded task).
 */
public record Capabilities(
        int contractVersion,
        boolean notifications,
        boolean filterPushdown,
        boolean batchEnqueue,
        boolean batchComplete,
        boolean groupPushdown,
        boolean priorities,
        boolean claimHolder,
        boolean cancel,
        boolean taskListing,
        boolean queueListing,
        boolean importTasks,
        boolean audit,
        boolean control,
        boolean workerRegistry,
        boolean counters,
        boolean fairShares,
        boolean priorityAging,
        boolean retention,
        boolean dedup,
        boolean payloadRefs,
        boolean discardSucceeded) {
    /** The contract version this binding implements ({@code rdq.spi.CONTRACT_VERSION}). */
    public static final int CONTRACT_VERSION = 5;
}

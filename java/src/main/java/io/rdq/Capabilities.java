package io.rdq;

/** Optional accelerations a store offers; a worker works without any of them.
 * {@code notifications} is the contract's {@code notify}: {@link Storage#waitDue} blocks until a task may be due. */
public record Capabilities(
        boolean notifications,
        boolean filterPushdown,
        boolean batchEnqueue,
        boolean batchComplete,
        boolean groupPushdown) {}

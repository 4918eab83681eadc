package io.rdq;

/**
 * What {@link Storage#admit} did ({@code outcome}: added, skipped, replaced or extended) and the
 * task that holds the key now: the contract's {@code rdq.spi.Admitted}.
 */
public record Admitted(String outcome, String taskId, String queue) {}

package io.rdq;

/**
 * A per-task override of its queue's retry settings (null fields are not overridden). Opaque
 * to storage; a worker resolves it at claim time. Durations in seconds; {@code backoff} is
 * {@code "exponential"}, {@code "fixed"} or {@code "linear"}.
 */
public record RetryOverride(Integer maxAttempts, String backoff, Double base, Double cap, Double timeout) {}

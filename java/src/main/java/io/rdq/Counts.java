package io.rdq;

import java.time.Instant;

/**
 * How many attempts of {@code queue} ended in the minute that starts at {@code minute} (store
 * time, a whole minute), by how they ended (contract version 3): the same record as rdq's
 * Python {@code rdq.spi.Counts}.
 */
public record Counts(String queue, Instant minute, long succeeded, long failed, long dead, long deferred) {}

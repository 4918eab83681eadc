package io.rdq;

import java.time.Instant;
import java.util.List;

/**
 * A worker (or node) as the registry keeps it (contract version 3), the same record as rdq's
 * Python {@code rdq.spi.WorkerInfo}. The worker fills in everything but {@code startedAt} (the
 * store's time of its first heartbeat) and {@code seenAt} (the store's time of its last one).
 * {@code held}: tasks it held at its last heartbeat; {@code state}: {@code running}, or
 * {@code stopping} once it stopped claiming; {@code heartbeat}: seconds between heartbeats;
 * {@code extra}: a JSON object of its own.
 */
public record WorkerInfo(
        String id,
        String host,
        long pid,
        String version,
        List<String> queues,
        long concurrency,
        long held,
        String state,
        double heartbeat,
        Instant startedAt,
        Instant seenAt,
        RawJson extra) {

    public WorkerInfo {
        host = host == null ? "" : host;
        version = version == null ? "" : version;
        queues = queues == null ? List.of() : List.copyOf(queues);
        state = state == null ? "running" : state;
        extra = extra == null ? RawJson.trusted("{}") : extra;
    }

    /** A worker that says nothing of itself but its id. */
    public static WorkerInfo of(String id) {
        return new WorkerInfo(id, "", 0, "", List.of(), 0, 0, "running", 10.0, null, null, null);
    }

    /** This registration as stored, with the store's times. */
    public WorkerInfo seen(Instant started, Instant seen) {
        return new WorkerInfo(id, host, pid, version, queues, concurrency, held, state, heartbeat, started, seen, extra);
    }
}

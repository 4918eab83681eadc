package io.rdq;

import java.time.Instant;

/**
 * The flow control of one key of one queue (contract version 3), the same record as rdq's
 * Python {@code rdq.spi.Control}. It applies to every task of {@code queue} that has
 * {@code key}: {@code *} (every task of the queue), {@code handler:<handlerRef>}, or one of the
 * task's {@link Envelope#keys()}. A claim takes a task only when every control of its keys lets
 * it through: not {@code paused}; a {@code gate} (null: none) of at least 1, less one per task
 * claimed; fewer tasks with the key holding a live lease than {@code concurrency}; a token in
 * the {@code rate} bucket ({@code rate} per {@code per} seconds, at most {@code burst} tokens,
 * default {@code max(1, rate / 10)}).
 *
 * <p>Two settings belong to the queue's own control (key {@code *}) only and change the order
 * a claim takes due tasks in (contract version 4, {@code rdq.spi.ClaimOrder}): {@code fair}, a
 * key prefix ({@code tenant:}), shares the claims among the groups of the queue's tasks (a
 * task's group is its first key starting with it; the tasks without one are a group of their
 * own): every group's first task before any group's second. {@code aging}, seconds of waiting
 * worth one step of priority, orders by the due time less {@code priority × aging} seconds.
 * Null: strict priorities, highest first, oldest due first within one.
 *
 * <p>{@code state} is the engine's (a JSON object, stored as given). {@code version} and
 * {@code updatedAt} are the store's; {@code inUse} is filled in by
 * {@link Storage#listControls}: how many tasks with the key hold a live lease now.
 */
public record Control(
        String queue,
        String key,
        boolean paused,
        Long gate,
        Long concurrency,
        Long rate,
        double per,
        Long burst,
        String fair,
        Double aging,
        RawJson state,
        long version,
        Instant updatedAt,
        Long inUse) {

    public Control {
        state = state == null ? RawJson.trusted("{}") : state;
    }

    /** A control of {@code key} in {@code queue} that restricts nothing yet. */
    public static Control of(String queue, String key) {
        return new Control(queue, key, false, null, null, null, 1.0, null, null, null, null, 0, null, null);
    }

    /** The most tokens the rate bucket holds ({@code burst}, or a tenth of {@code rate}). */
    public long bucket() {
        if (burst != null) {
            return burst;
        }
        return Math.max(1, (rate == null ? 0 : rate) / 10);
    }

    /** This control as stored: {@code version} and {@code updatedAt} set, no {@code inUse}. */
    public Control stored(long newVersion, Instant at) {
        return new Control(queue, key, paused, gate, concurrency, rate, per, burst, fair, aging, state, newVersion,
                at, null);
    }
}

package io.rdq;

import java.time.Instant;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * One task, as stored and as sent over the wire: the same fields as rdq's Python envelope.
 *
 * <p>The store owns {@code status}, {@code createdAt}, {@code leaseExpiresAt},
 * {@code claimedBy}, {@code claimedAt}, {@code completedAt}, {@code deadLetteredAt},
 * {@code cancelledAt} and {@code corrupt}: {@link Storage#enqueue} ignores what the caller put
 * there. {@code extra} holds fields a newer producer wrote that this version does not know;
 * they are kept and returned as written. {@code corrupt} is set only on a task read back whose
 * stored form does not decode: it says what is wrong, and the fields that did not decode hold
 * their defaults. {@code keys} (contract version 3) are the task's flow-control keys beyond its
 * queue's ({@code *}) and its handler's ({@code handler:<handlerRef>}): a claim honours the
 * control records of every one of them.
 */
public record Envelope(
        String id,
        String queue,
        String handlerRef,
        RawJson payload,
        Map<String, String> headers,
        Status status,
        int attemptCount,
        int redriveCount,
        List<Attempt> attempts,
        Instant createdAt,
        Instant nextAttemptAt,
        Instant leaseExpiresAt,
        Instant completedAt,
        Instant deadLetteredAt,
        RetryOverride retry,
        int priority,
        List<String> keys,
        String claimedBy,
        Instant claimedAt,
        Instant cancelledAt,
        String corrupt,
        int formatVersion,
        Map<String, RawJson> extra) {

    /** The envelope format this version writes. */
    public static final int FORMAT_VERSION = 1;
    public static final int MIN_PRIORITY = -10;
    public static final int MAX_PRIORITY = 10;
    public static final int DEFAULT_PRIORITY = 0;

    public Envelope {
        payload = payload == null ? RawJson.NULL : payload;
        headers = headers == null ? Map.of() : Collections.unmodifiableMap(new LinkedHashMap<>(headers));
        status = status == null ? Status.PENDING : status;
        attempts = attempts == null ? List.of() : List.copyOf(attempts);
        keys = keys == null ? List.of() : List.copyOf(keys);
        extra = extra == null ? Map.of() : Collections.unmodifiableMap(new LinkedHashMap<>(extra));
    }

    /** A new task for {@code queue}, run by {@code handlerRef}, with {@code payload}. */
    public static Envelope of(String id, String queue, String handlerRef, RawJson payload) {
        return builder(id, queue, handlerRef).payload(payload).build();
    }

    public static Builder builder(String id, String queue, String handlerRef) {
        return new Builder(id, queue, handlerRef);
    }

    /** A builder holding every field of this envelope. */
    public Builder toBuilder() {
        return new Builder(this);
    }

    /** The error type of the last attempt record, or null. */
    public String lastErrorType() {
        return attempts.isEmpty() ? null : attempts.get(attempts.size() - 1).errorType();
    }

    /** The time a task is listed by in its status (see {@link TaskFilter}). */
    public Instant statusTime() {
        return switch (status) {
            case PENDING -> nextAttemptAt;
            case IN_FLIGHT -> leaseExpiresAt;
            case SUCCEEDED -> completedAt;
            case DEAD -> deadLetteredAt;
            case CANCELLED -> cancelledAt;
        };
    }

    /** Builds envelopes; every field but id, queue and handlerRef has the contract's default. */
    public static final class Builder {
        private String id;
        private String queue;
        private String handlerRef;
        private RawJson payload = RawJson.NULL;
        private Map<String, String> headers = Map.of();
        private Status status = Status.PENDING;
        private int attemptCount;
        private int redriveCount;
        private List<Attempt> attempts = List.of();
        private Instant createdAt;
        private Instant nextAttemptAt;
        private Instant leaseExpiresAt;
        private Instant completedAt;
        private Instant deadLetteredAt;
        private RetryOverride retry;
        private int priority = DEFAULT_PRIORITY;
        private List<String> keys = List.of();
        private String claimedBy;
        private Instant claimedAt;
        private Instant cancelledAt;
        private String corrupt;
        private int formatVersion = FORMAT_VERSION;
        private Map<String, RawJson> extra = Map.of();

        private Builder(String id, String queue, String handlerRef) {
            this.id = id;
            this.queue = queue;
            this.handlerRef = handlerRef;
        }

        private Builder(Envelope e) {
            this(e.id, e.queue, e.handlerRef);
            payload = e.payload;
            headers = e.headers;
            status = e.status;
            attemptCount = e.attemptCount;
            redriveCount = e.redriveCount;
            attempts = e.attempts;
            createdAt = e.createdAt;
            nextAttemptAt = e.nextAttemptAt;
            leaseExpiresAt = e.leaseExpiresAt;
            completedAt = e.completedAt;
            deadLetteredAt = e.deadLetteredAt;
            retry = e.retry;
            priority = e.priority;
            keys = e.keys;
            claimedBy = e.claimedBy;
            claimedAt = e.claimedAt;
            cancelledAt = e.cancelledAt;
            corrupt = e.corrupt;
            formatVersion = e.formatVersion;
            extra = e.extra;
        }

        public Builder id(String value) { id = value; return this; }
        public Builder queue(String value) { queue = value; return this; }
        public Builder handlerRef(String value) { handlerRef = value; return this; }
        public Builder payload(RawJson value) { payload = value; return this; }
        public Builder headers(Map<String, String> value) { headers = value; return this; }
        public Builder status(Status value) { status = Objects.requireNonNull(value); return this; }
        public Builder attemptCount(int value) { attemptCount = value; return this; }
        public Builder redriveCount(int value) { redriveCount = value; return this; }
        public Builder attempts(List<Attempt> value) { attempts = value; return this; }
        public Builder createdAt(Instant value) { createdAt = value; return this; }
        public Builder nextAttemptAt(Instant value) { nextAttemptAt = value; return this; }
        public Builder leaseExpiresAt(Instant value) { leaseExpiresAt = value; return this; }
        public Builder completedAt(Instant value) { completedAt = value; return this; }
        public Builder deadLetteredAt(Instant value) { deadLetteredAt = value; return this; }
        public Builder retry(RetryOverride value) { retry = value; return this; }
        public Builder priority(int value) { priority = value; return this; }
        public Builder keys(List<String> value) { keys = value; return this; }
        public Builder claimedBy(String value) { claimedBy = value; return this; }
        public Builder claimedAt(Instant value) { claimedAt = value; return this; }
        public Builder cancelledAt(Instant value) { cancelledAt = value; return this; }
        public Builder corrupt(String value) { corrupt = value; return this; }
        public Builder formatVersion(int value) { formatVersion = value; return this; }
        public Builder extra(Map<String, RawJson> value) { extra = value; return this; }

        public Envelope build() {
            return new Envelope(id, queue, handlerRef, payload, headers, status, attemptCount, redriveCount,
                    attempts, createdAt, nextAttemptAt, leaseExpiresAt, completedAt, deadLetteredAt, retry,
                    priority, keys, claimedBy, claimedAt, cancelledAt, corrupt, formatVersion, extra);
        }
    }
}

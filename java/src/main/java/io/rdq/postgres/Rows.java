package io.rdq.postgres;

import io.rdq.Envelope;
import io.rdq.RawJson;
import io.rdq.Status;
import io.rdq.ValidationException;
import io.rdq.json.EnvelopeJson;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Consumer;
import java.util.function.Function;

/**
 * Rows of the task table back to envelopes. The {@code json} columns are decoded into their
 * types; a value that does not decode (a row written by hand or by a faulty producer) never
 * makes the read fail: the envelope comes back with {@code corrupt} saying which column is
 * wrong and what it holds, that field at its default and every other field filled in.
 */
final class Rows {
    /** How much of a raw stored value {@code corrupt} quotes, as the Python plugin does. */
    private static final int MAX_SHOWN = 2000;

    private Rows() {}

    static Envelope envelope(ResultSet rs) throws SQLException {
        List<String> problems = new ArrayList<>();
        Envelope.Builder b = Envelope.builder(rs.getString("id"), rs.getString("queue"), rs.getString("handler_ref"));
        String status = rs.getString("status");
        try {
            b.status(Status.valueOf(status));
        } catch (IllegalArgumentException e) {
            problems.add("status: unknown status " + shown(status));
        }
        String payload = rs.getString("payload");
        b.payload(payload == null ? RawJson.NULL : RawJson.trusted(payload));
        decode(problems, "headers", rs.getString("headers"), EnvelopeJson::decodeHeaders, b::headers);
        b.attemptCount(rs.getInt("attempt_count"));
        b.redriveCount(rs.getInt("redrive_count"));
        decode(problems, "attempts", rs.getString("attempts"), EnvelopeJson::decodeAttempts, b::attempts);
        b.createdAt(instant(rs, "created_at"));
        b.nextAttemptAt(instant(rs, "next_attempt_at"));
        b.leaseExpiresAt(instant(rs, "lease_expires_at"));
        b.completedAt(instant(rs, "completed_at"));
        b.deadLetteredAt(instant(rs, "dead_lettered_at"));
        String retry = rs.getString("retry");
        if (retry != null) {
            decode(problems, "retry", retry, EnvelopeJson::decodeRetry, b::retry);
        }
        b.priority(rs.getInt("priority"));
        b.claimedBy(rs.getString("claimed_by"));
        b.claimedAt(instant(rs, "claimed_at"));
        b.cancelledAt(instant(rs, "cancelled_at"));
        b.formatVersion(rs.getInt("format_version"));
        String extra = rs.getString("extra");
        if (extra != null && !"{}".equals(extra)) {
            decode(problems, "extra", extra, text -> {
                var fields = new java.util.LinkedHashMap<>(EnvelopeJson.decodeExtra(text));
                fields.keySet().removeAll(EnvelopeJson.KNOWN); // known names in extra are ignored
                return fields;
            }, b::extra);
        }
        String quarantine = rs.getString("quarantine");
        if (quarantine != null && !quarantine.isBlank() && !"{}".equals(quarantine.strip())) {
            problems.add("quarantined values that no reader can use: " + shown(quarantine));
        }
        if (!problems.isEmpty()) {
            b.corrupt(String.join("; ", problems));
        }
        return b.build();
    }

    private static <T> void decode(List<String> problems, String column, String text, Function<String, T> decoder, Consumer<T> into) {
        if (text == null) {
            return;
        }
        try {
            into.accept(decoder.apply(text));
        } catch (ValidationException e) {
            String where = e.field() == null || e.field().equals("json") ? column : e.field();
            problems.add(where + ": " + e.reason() + " (stored: " + shown(text) + ")");
        }
    }

    private static String shown(String text) {
        if (text == null) {
            return "NULL";
        }
        return text.length() <= MAX_SHOWN ? text : text.substring(0, MAX_SHOWN) + "…";
    }

    static Instant instant(ResultSet rs, String column) throws SQLException {
        OffsetDateTime at = rs.getObject(column, OffsetDateTime.class);
        return at == null ? null : at.toInstant();
    }
}

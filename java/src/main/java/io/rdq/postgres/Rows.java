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
 * types; a value that does not decode (a row written by hand or by a faulty producer: of the
 * wrong type, nested deeper than the decoder goes, a time outside the years 1-9999) never
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
        b.createdAt(time(problems, rs, "created_at"));
        b.nextAttemptAt(time(problems, rs, "next_attempt_at"));
        b.leaseExpiresAt(time(problems, rs, "lease_expires_at"));
        b.completedAt(time(problems, rs, "completed_at"));
        b.deadLetteredAt(time(problems, rs, "dead_lettered_at"));
        String retry = rs.getString("retry");
        if (retry != null) {
            decode(problems, "retry", retry, EnvelopeJson::decodeRetry, b::retry);
        }
        b.priority(rs.getInt("priority"));
        b.keys(strings(rs, "keys"));
        b.claimedBy(rs.getString("claimed_by"));
        b.claimedAt(time(problems, rs, "claimed_at"));
        b.cancelledAt(time(problems, rs, "cancelled_at"));
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
        } catch (RuntimeException | StackOverflowError e) {
            // whatever else the decoder throws (JSON nested deeper than it goes, say), a read
            // never fails on a stored row
            problems.add(column + ": does not decode (" + e + ") (stored: " + shown(text) + ")");
        }
    }

    /** A time column of the task: {@code null} with a problem named when it lies outside the
     * years 1-9999 (a schema without task_time_range_check may hold one; no Python reader of
     * the same row can). */
    private static Instant time(List<String> problems, ResultSet rs, String column) throws SQLException {
        Instant at = instant(rs, column);
        if (at != null && (at.isBefore(io.rdq.Limits.MIN_TIME) || at.isAfter(io.rdq.Limits.MAX_TIME))) {
            problems.add("column " + column + " holds " + rs.getString(column) + ", outside the years 1-9999");
            return null;
        }
        return at;
    }

    /** A {@code text[]} column as a list (empty for NULL). */
    static List<String> strings(ResultSet rs, String column) throws SQLException {
        java.sql.Array array = rs.getArray(column);
        if (array == null) {
            return List.of();
        }
        return java.util.Arrays.asList((String[]) array.getArray());
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

package io.rdq.json;

import io.rdq.ValidationException;
import java.time.Duration;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.time.format.DateTimeParseException;
import java.time.temporal.ChronoUnit;

/** Timestamps and durations in rdq's JSON: RFC 3339 in UTC with microseconds, ISO 8601 durations. */
public final class Times {
    private static final DateTimeFormatter SECONDS = DateTimeFormatter.ofPattern("uuuu-MM-dd'T'HH:mm:ss").withZone(ZoneOffset.UTC);

    private Times() {}

    /** {@code 2026-11-30T01:02:03.000004Z}; the fraction is left out when it is zero (as
     * rdq's Python encoder writes it). Sub-microsecond digits are dropped. */
    public static String format(Instant at) {
        Instant micros = at.truncatedTo(ChronoUnit.MICROS);
        int fraction = micros.getNano() / 1000;
        String base = SECONDS.format(micros);
        return fraction == 0 ? base + "Z" : base + String.format(".%06dZ", fraction);
    }

    /** An RFC 3339 timestamp with an offset; {@link ValidationException} naming {@code field}
     * for text without an offset ("must be timezone-aware") or that is no timestamp. */
    public static Instant parse(String text, String field) {
        try {
            return OffsetDateTime.parse(text, DateTimeFormatter.ISO_OFFSET_DATE_TIME).toInstant();
        } catch (DateTimeParseException notAware) {
            try {
                LocalDateTime.parse(text, DateTimeFormatter.ISO_LOCAL_DATE_TIME);
            } catch (DateTimeParseException notATime) {
                throw new ValidationException(field, "must be a datetime");
            }
            throw new ValidationException(field, "must be timezone-aware");
        }
    }

    /** An ISO 8601 duration ({@code PT0.3S}, {@code -PT5S}, {@code P1DT1S}). */
    public static Duration parseDuration(String text, String field) {
        try {
            return Duration.parse(text);
        } catch (DateTimeParseException e) {
            throw new ValidationException(field, "must be a duration");
        }
    }

    /** Whole microseconds of {@code duration} (PostgreSQL's interval resolution). */
    public static long micros(Duration duration) {
        return duration.getSeconds() * 1_000_000L + duration.getNano() / 1000;
    }
}

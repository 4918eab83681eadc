package io.rdq.json;

import io.rdq.ValidationException;
import java.time.DateTimeException;
import java.time.Duration;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.time.format.DateTimeParseException;
import java.time.temporal.ChronoUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** Timestamps and durations in rdq's JSON: RFC 3339 in UTC with microseconds, ISO 8601 durations. */
public final class Times {
    private static final Pattern RFC3339 = Pattern.compile(
            "(\\d{4})-(\\d{2})-(\\d{2})[Tt ](\\d{2}):(\\d{2}):(\\d{2})(?:\\.(?<fraction>\\d+))?"
            + "(?<offset>[Zz]|(?<sign>[+-])(?<hours>\\d{2}):?(?<minutes>\\d{2}))?");
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

    /** An RFC 3339 timestamp with an offset, as rdq's readers take one: {@code T}, {@code t}
     * or a space between date and time, any number of fraction digits (rounded to the nearest
     * microsecond, a half up), and {@code Z}, {@code z} or an offset {@code +hh:mm} (also
     * {@code +hhmm}). {@link ValidationException} naming {@code field} for text without an
     * offset ("must be timezone-aware") or that is no timestamp. */
    public static Instant parse(String text, String field) {
        Matcher m = RFC3339.matcher(text);
        if (!m.matches()) {
            throw new ValidationException(field, "must be a datetime");
        }
        LocalDateTime local;
        try {
            local = LocalDateTime.of(Integer.parseInt(m.group(1)), Integer.parseInt(m.group(2)),
                    Integer.parseInt(m.group(3)), Integer.parseInt(m.group(4)), Integer.parseInt(m.group(5)),
                    Integer.parseInt(m.group(6)));
        } catch (DateTimeException e) {
            throw new ValidationException(field, "must be a datetime");
        }
        if (local.getYear() < 1) {
            throw new ValidationException(field, "must be a datetime");
        }
        if (m.group("offset") == null) {
            throw new ValidationException(field, "must be timezone-aware");
        }
        long offsetSeconds = 0;
        if (m.group("sign") != null) {
            int hours = Integer.parseInt(m.group("hours"));
            int minutes = Integer.parseInt(m.group("minutes"));
            if (hours > 23 || minutes > 59) {
                throw new ValidationException(field, "must be a datetime");
            }
            offsetSeconds = (m.group("sign").equals("-") ? -1 : 1) * (hours * 3600L + minutes * 60L);
        }
        String digits = m.group("fraction") == null ? "" : m.group("fraction");
        long micros = Long.parseLong((digits + "000000").substring(0, 6));
        if (digits.length() > 6 && digits.charAt(6) >= '5') {
            micros++;
        }
        return Instant.ofEpochSecond(local.toEpochSecond(ZoneOffset.UTC) - offsetSeconds, micros * 1000);
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

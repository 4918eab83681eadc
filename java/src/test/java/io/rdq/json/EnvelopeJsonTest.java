package io.rdq.json;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.rdq.Attempt;
import io.rdq.Envelope;
import io.rdq.Outcome;
import io.rdq.RawJson;
import io.rdq.RetryOverride;
import io.rdq.ValidationException;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

class EnvelopeJsonTest {
    @ParameterizedTest
    @ValueSource(strings = {"null", "0", "-12345678901", "9007199254740993", "5e-324", "1.7976931348623157e308",
        "\"\"", "\"a\\u0000b \\u2028 \\ud83d\\ude00\"", "[]", "{}", "[1,\"two\",3.0,null,true,{\"six\":6},[7]]",
        "{\"$set\":{\"a.b\":1},\"\":\"empty key\"}", "{ \"spaced\" : [ 1 , 2 ] }"})
    void payloadsAndUnknownFieldsComeBackByteForByte(String json) {
        String text = "{\"id\":\"t-1\",\"queue\":\"q\",\"handler_ref\":\"h\",\"payload\":" + json + ",\"x_new\":" + json + "}";
        Envelope task = EnvelopeJson.decode(text);
        assertEquals(json, task.payload().text());
        assertEquals(Map.of("x_new", RawJson.trusted(json)), task.extra());
        Envelope again = EnvelopeJson.decode(EnvelopeJson.encode(task));
        assertEquals(task, again);
    }

    @Test
    void encodingHasThePythonFieldNamesAndOrder() {
        Instant at = Instant.parse("2026-11-30T01:02:03.000004Z");
        Envelope task = Envelope.builder("t-1", "q", "h").payload(RawJson.of("{\"n\":1}"))
                .attempts(List.of(new Attempt(1, Outcome.FAILED, "E", "m", at, at, "w", null)))
                .retry(new RetryOverride(3, null, 1.5, null, null)).createdAt(at).build();
        assertEquals("{\"id\":\"t-1\",\"queue\":\"q\",\"handler_ref\":\"h\",\"payload\":{\"n\":1},\"headers\":{},"
                + "\"status\":\"PENDING\",\"attempt_count\":0,\"redrive_count\":0,\"attempts\":[{\"number\":1,"
                + "\"outcome\":\"FAILED\",\"error_type\":\"E\",\"error_message\":\"m\",\"started_at\":"
                + "\"2026-11-30T01:02:03.000004Z\",\"finished_at\":\"2026-11-30T01:02:03.000004Z\",\"worker_id\":\"w\","
                + "\"traceback\":null}],\"created_at\":\"2026-11-30T01:02:03.000004Z\",\"next_attempt_at\":null,"
                + "\"lease_expires_at\":null,\"completed_at\":null,\"dead_lettered_at\":null,\"retry\":{\"max_attempts\":3,"
                + "\"base\":1.5},\"priority\":0,\"keys\":[],\"claimed_by\":null,\"claimed_at\":null,\"cancelled_at\":null,"
                + "\"corrupt\":null,\"format_version\":1}", EnvelopeJson.encode(task));
    }

    @Test
    void decodingNamesTheBadField() {
        var e = assertThrows(ValidationException.class, () -> EnvelopeJson.decode(
                "{\"id\":\"t\",\"queue\":\"q\",\"handler_ref\":\"h\",\"attempts\":[{\"number\":\"one\",\"outcome\":\"FAILED\"}]}"));
        assertEquals("attempts[0].number", e.field());
        e = assertThrows(ValidationException.class, () -> EnvelopeJson.decode(
                "{\"id\":\"t\",\"queue\":\"q\",\"handler_ref\":\"h\",\"next_attempt_at\":\"2030-01-01T00:00:00\"}"));
        assertEquals("next_attempt_at", e.field());
        assertEquals("must be timezone-aware", e.reason());
        e = assertThrows(ValidationException.class, () -> EnvelopeJson.decode("{\"queue\":\"q\",\"handler_ref\":\"h\"}"));
        assertEquals("id", e.field());
    }

    @Test
    void attemptRecordsMayLeaveOptionalFieldsOut() {
        Attempt a = EnvelopeJson.decodeAttempt("{\"number\":2,\"outcome\":\"TIMEOUT\"}", "attempt");
        assertEquals(2, a.number());
        assertNull(a.errorType());
    }

    @Test
    void timestampsAreUtcWithMicroseconds() {
        assertEquals("2020-01-01T00:00:00Z", Times.format(Instant.parse("2020-01-01T00:00:00Z")));
        assertEquals("2020-01-01T00:00:00.100000Z", Times.format(Instant.parse("2020-01-01T00:00:00.1Z")));
        assertEquals("2020-01-01T00:00:00.000001Z", Times.format(Instant.parse("2020-01-01T00:00:00.000001999Z")));
        assertEquals(Instant.parse("2019-12-31T22:00:00Z"), Times.parse("2020-01-01T00:00:00+02:00", "at"));
    }

    /** What every reader takes (docs/postgres-schema.md): the times rdq's Python reader takes,
     * to the nearest microsecond. */
    @ParameterizedTest
    @CsvSource({
        "2026-01-02T03:04:05Z, 2026-01-02T03:04:05Z",
        "2026-01-02T03:04:05.000000Z, 2026-01-02T03:04:05Z",
        "2026-01-02T03:04:05.5Z, 2026-01-02T03:04:05.500000Z",
        "2026-01-02T03:04:05.1234565Z, 2026-01-02T03:04:05.123457Z",
        "2026-01-02T03:04:05.12345649Z, 2026-01-02T03:04:05.123456Z",
        "2026-01-02T23:59:59.9999996Z, 2026-01-03T00:00:00Z",
        "2026-01-02t03:04:05.25z, 2026-01-02T03:04:05.250000Z",
        "2026-01-02 05:04:05+02:00, 2026-01-02T03:04:05Z",
        "2026-01-02T00:34:05-02:30, 2026-01-02T03:04:05Z",
        "2026-01-02T00:34:05-0230, 2026-01-02T03:04:05Z",
        "2026-01-02T03:04:05-00:00, 2026-01-02T03:04:05Z",
        "2026-01-02T03:04:05+23:59, 2026-01-01T03:05:05Z",
    })
    void readersTakeAnyRfc3339Time(String written, String meant) {
        assertEquals(Instant.parse(meant), Times.parse(written, "at"));
    }

    @ParameterizedTest
    @ValueSource(strings = {"2026-01-02T03:04Z", "2026-01-02T03:04:05+02", "2026-01-02T03:04:05+24:00",
        "2026-02-30T03:04:05Z", "0000-01-01T00:00:00Z", "2026-01-02T03:04:60Z", "2026-01-02T03:04:05.Z",
        "2026-01-02T03:04:05,5Z", "2026-1-02T03:04:05Z", "2026-01-02T03:04:05Z ", "yesterday"})
    void textThatIsNoTimeIsRefused(String text) {
        ValidationException e = assertThrows(ValidationException.class, () -> Times.parse(text, "at"));
        assertEquals("at", e.field());
        assertEquals("must be a datetime", e.reason());
    }

    @Test
    void aTimeWithoutAnOffsetIsRefused() {
        ValidationException e = assertThrows(ValidationException.class,
                () -> Times.parse("2026-01-02T03:04:05.5", "attempts[0].started_at"));
        assertEquals("attempts[0].started_at", e.field());
    }
}

package io.rdq;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.time.Duration;
import java.time.Instant;
import org.junit.jupiter.api.Test;

class LimitsTest {
    private static String field(Runnable check) {
        return assertThrows(ValidationException.class, check::run).field();
    }

    @Test
    void badInputNamesTheSameFieldsAsThePythonChecks() {
        Envelope ok = Envelope.of("t-1", "q", "h:fn", RawJson.of("{}"));
        assertEquals("id", field(() -> Limits.checkTask(ok.toBuilder().id("has space").build())));
        assertEquals("queue", field(() -> Limits.checkTask(ok.toBuilder().queue("-q").build())));
        assertEquals("handler_ref", field(() -> Limits.checkTask(ok.toBuilder().handlerRef("a b").build())));
        assertEquals("headers.big", field(() -> Limits.checkTask(ok.toBuilder()
                .headers(java.util.Map.of("big", "v".repeat(4097))).build())));
        assertEquals("priority", field(() -> Limits.checkTask(ok.toBuilder().priority(11).build())));
        assertEquals("payload", field(() -> Limits.checkTask(ok.toBuilder()
                .payload(RawJson.encode("x".repeat(Limits.MAX_PAYLOAD_BYTES))).build())));
        assertEquals("lease", field(() -> Limits.checkLease(Duration.ZERO, "lease")));
        assertEquals("selector.ids[1]", field(() -> Limits.checkSelector(Selector.ids("a", ""))));
        assertEquals("attempt.number", field(() -> Limits.checkAttempt(
                new Attempt(0, Outcome.FAILED, null, null, Instant.EPOCH, null, null, null), "attempt")));
    }

    @Test
    void payloadsAndUnknownFieldsNestAtMost64Levels() {
        Envelope ok = Envelope.of("t-1", "q", "h:fn", RawJson.of("{}"));
        String deepest = "[".repeat(Limits.MAX_DEPTH) + "\"[[{{\"" + "]".repeat(Limits.MAX_DEPTH);
        Limits.checkTask(ok.toBuilder().payload(RawJson.of(deepest)).build());
        String deeper = "[".repeat(Limits.MAX_DEPTH + 1) + "]".repeat(Limits.MAX_DEPTH + 1);
        assertEquals("payload", field(() -> Limits.checkTask(ok.toBuilder().payload(RawJson.of(deeper)).build())));
        String farTooDeep = "[".repeat(1000) + "]".repeat(1000);
        assertEquals("payload", field(() -> Limits.checkTask(ok.toBuilder().payload(RawJson.of(farTooDeep)).build())));
        assertEquals("x_newer", field(() -> Limits.checkTask(ok.toBuilder()
                .extra(java.util.Map.of("x_newer", RawJson.of(deeper))).build())));
        assertEquals("attempts[0].number", field(() -> Limits.checkTask(ok.toBuilder().attempts(java.util.List.of(
                new Attempt(0, Outcome.FAILED, null, null, null, null, null, null))).build())));
    }

    @Test
    void timesLieWithinTheYears1To9999AndDelaysWithin100Years() {
        Envelope ok = Envelope.of("t-1", "q", "h:fn", RawJson.of("{}"));
        Limits.checkTask(ok.toBuilder().nextAttemptAt(Limits.MAX_TIME).build());
        assertEquals("next_attempt_at", field(() -> Limits.checkTask(ok.toBuilder()
                .nextAttemptAt(Limits.MAX_TIME.plusNanos(1000)).build())));
        assertEquals("next_at", field(() -> Limits.checkInstant(Instant.parse("-0001-12-31T00:00:00Z"), "next_at")));
        assertEquals("attempts[0].finished_at", field(() -> Limits.checkTask(ok.toBuilder().attempts(java.util.List.of(
                new Attempt(1, Outcome.FAILED, null, null, null, Instant.parse("+12000-01-01T00:00:00Z"), null, null))).build())));
        Limits.checkDelay(Limits.MAX_DELAY, "delay");
        assertEquals("delay", field(() -> Limits.checkDelay(Limits.MAX_DELAY.plusDays(1), "delay")));
    }

    @Test
    void cursorsAreBoundToTheirScope() {
        String scope = Cursors.scope("dlq", "q", null);
        String cursor = Cursors.encode(scope, Instant.parse("2026-01-01T00:00:00.5Z"), "t-1");
        assertEquals(new Cursors.Position(Instant.parse("2026-01-01T00:00:00.5Z"), "t-1"), Cursors.decode(cursor, scope));
        assertThrows(StaleCursorException.class, () -> Cursors.decode(cursor, Cursors.scope("dlq", "other", null)));
        assertThrows(StaleCursorException.class, () -> Cursors.decode("not-a-cursor!", scope));
    }
}

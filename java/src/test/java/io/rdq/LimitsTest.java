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
    void payloadRefsNameTheSameFieldsAsThePythonChecks() {
        String ref = "sha256:" + "a".repeat(64);
        assertEquals(java.util.List.of(ref), Limits.checkPayloadRefs(java.util.List.of(ref)));
        assertEquals("refs", field(() -> Limits.checkPayloadRefs(null)));
        assertEquals("refs[1]", field(() -> Limits.checkPayloadRefs(java.util.List.of(ref, "sha256 x"))));
        assertEquals("refs[0]", field(() -> Limits.checkPayloadRefs(java.util.List.of("x".repeat(201)))));
        assertEquals("refs", field(() -> Limits.checkPayloadRefs(java.util.Collections.nCopies(1001, ref))));
    }

    @Test
    void keysControlsWorkersAndCountsNameTheSameFieldsAsThePythonChecks() {
        Envelope ok = Envelope.of("t-1", "q", "h:fn", RawJson.of("{}"));
        Limits.checkTask(ok.toBuilder().keys(java.util.List.of("dep:psp", "tenant:\u00e4-1")).build());
        for (String bad : new String[] {"*", "handler:x", "has space", "x".repeat(201), ""}) {
            assertEquals("keys[0]", field(() -> Limits.checkTask(ok.toBuilder().keys(java.util.List.of(bad)).build())));
        }
        assertEquals("keys", field(() -> Limits.checkTask(ok.toBuilder()
                .keys(java.util.Collections.nCopies(9, "k")).build())));
        Control control = Control.of("q", "k");
        Limits.checkControl(control, "control");
        assertEquals("control.key", field(() -> Limits.checkControl(Control.of("q", "has space"), "control")));
        assertEquals("control.gate", field(() -> Limits.checkControl(
                new Control("q", "k", false, -1L, null, null, 1.0, null, null, null, null, 0, null, null), "control")));
        assertEquals("control.rate", field(() -> Limits.checkControl(
                new Control("q", "k", false, null, null, 0L, 1.0, null, null, null, null, 0, null, null), "control")));
        assertEquals("control.per", field(() -> Limits.checkControl(
                new Control("q", "k", false, null, null, null, 0.0, null, null, null, null, 0, null, null), "control")));
        assertEquals("control.state", field(() -> Limits.checkControl(
                new Control("q", "k", false, null, null, null, 1.0, null, null, null, RawJson.of("[1]"), 0, null, null), "control")));
        Limits.checkControl(new Control("q", "*", false, null, null, null, 1.0, null, "tenant:", 60.0, null, 0, null,
                null), "control");
        assertEquals("control.fair", field(() -> Limits.checkControl(
                new Control("q", "k", false, null, null, null, 1.0, null, "tenant:", null, null, 0, null, null), "control")));
        assertEquals("control.fair", field(() -> Limits.checkControl(
                new Control("q", "*", false, null, null, null, 1.0, null, "a b", null, null, 0, null, null), "control")));
        assertEquals("control.aging", field(() -> Limits.checkControl(
                new Control("q", "*", false, null, null, null, 1.0, null, null, 0.0, null, 0, null, null), "control")));
        assertEquals("expected_version", field(() -> Limits.checkVersion(-1, "expected_version")));
        assertEquals("info.id", field(() -> Limits.checkWorkerInfo(WorkerInfo.of(""), "info")));
        assertEquals("info.queues[0]", field(() -> Limits.checkWorkerInfo(new WorkerInfo("w", "h", 1, "v",
                java.util.List.of("has space"), 0, 0, "running", 10.0, null, null, null), "info")));
        assertEquals("info.heartbeat", field(() -> Limits.checkWorkerInfo(new WorkerInfo("w", "h", 1, "v",
                java.util.List.of(), 0, 0, "running", 0.0, null, null, null), "info")));
        Instant minute = Instant.parse("2031-05-06T07:08:00Z");
        Limits.checkCounts(java.util.List.of(new Counts("q", minute, 1, 0, 0, 0)), "counts");
        assertEquals("counts[0].minute", field(() -> Limits.checkCounts(
                java.util.List.of(new Counts("q", minute.plusSeconds(1), 1, 0, 0, 0)), "counts")));
        assertEquals("counts[0].failed", field(() -> Limits.checkCounts(
                java.util.List.of(new Counts("q", minute, 0, -1, 0, 0)), "counts")));
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

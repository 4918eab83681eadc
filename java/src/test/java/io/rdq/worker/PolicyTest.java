package io.rdq.worker;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.rdq.Outcome;
import io.rdq.RetryOverride;
import java.io.IOException;
import java.time.Duration;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;

/** The retry policy of rdq's Python engine (rdq.policy, rdq.config.resolve, rdq._classify). */
class PolicyTest {
    @Test
    void backoffBoundsAreThoseOfThePythonPolicy() {
        Backoff exp = Backoff.exponential(1.0, 300.0);
        assertArrayEquals(new double[] {0.0, 1.0}, exp.bounds(1));
        assertArrayEquals(new double[] {0.0, 8.0}, exp.bounds(4));
        assertArrayEquals(new double[] {0.0, 300.0}, exp.bounds(100));
        assertArrayEquals(new double[] {2.0, 2.0}, Backoff.fixed(2.0).bounds(7));
        assertArrayEquals(new double[] {6.0, 6.0}, Backoff.linear(2.0, 10.0).bounds(3));
        assertArrayEquals(new double[] {10.0, 10.0}, Backoff.linear(2.0, 10.0).bounds(9));
        Random random = new Random(7);
        for (int i = 0; i < 1000; i++) {
            double d = exp.delay(3, random);
            assertTrue(d >= 0 && d <= 4.0, "full jitter stays within [0, min(cap, base*2^(n-1))]");
        }
    }

    @Test
    void keepSucceededIsTheDefaultAndSurvivesEveryChangeAndOverride() {
        assertTrue(QueueSettings.DEFAULTS.keepSucceeded());
        QueueSettings discarding = QueueSettings.DEFAULTS.withKeepSucceeded(false);
        assertEquals(false, discarding.withMaxAttempts(2).withLease(Duration.ofSeconds(5)).keepSucceeded());
        assertEquals(false, discarding.resolve(new RetryOverride(3, "fixed", 1.5, null, 9.0)).keepSucceeded());
        assertTrue(discarding.withKeepSucceeded(true).keepSucceeded());
    }

    @Test
    void aTasksOverrideWinsAndInvalidValuesAreIgnored() {
        QueueSettings queue = QueueSettings.DEFAULTS;
        QueueSettings resolved = queue.resolve(new RetryOverride(3, "fixed", 1.5, null, 9.0));
        assertEquals(3, resolved.maxAttempts());
        assertEquals(Backoff.fixed(1.5), resolved.backoff());
        assertEquals(Duration.ofSeconds(9), resolved.timeout());
        QueueSettings ignored = queue.resolve(new RetryOverride(0, "sometimes", -1.0, null, -5.0));
        assertEquals(queue.maxAttempts(), ignored.maxAttempts());
        assertEquals(queue.backoff(), ignored.backoff());
        assertEquals(queue.timeout(), ignored.timeout());
        assertEquals(Backoff.exponential(1.0, 1.0), queue.resolve(new RetryOverride(null, null, null, 0.5, null)).backoff(),
                "a cap below base is raised to base");
    }

    @Test
    void failuresRetryUntilMaxAttemptsThenDeadLetterKeepingTheirOutcome() {
        QueueSettings settings = QueueSettings.DEFAULTS.withMaxAttempts(3).withBackoff(Backoff.fixed(2.0));
        Decision first = Decision.failed(new IOException("down"), 1, settings, new Random());
        assertEquals(Decision.Action.RESCHEDULE, first.action());
        assertEquals(Outcome.FAILED, first.outcome());
        assertEquals(2.0, first.delay());
        assertEquals("java.io.IOException", first.errorType());
        assertEquals("down", first.errorMessage());
        assertTrue(first.traceback().startsWith("java.io.IOException: down"));
        Decision last = Decision.failed(new IOException("down"), 3, settings, new Random());
        assertEquals(Decision.Action.DEAD_LETTER, last.action());
        assertEquals(Outcome.FAILED, last.outcome());
        Decision timeout = Decision.timedOut(3, settings.withTimeout(Duration.ofMillis(1500)), new Random());
        assertEquals(Outcome.TIMEOUT, timeout.outcome());
        assertEquals("handler exceeded its timeout of 1.5s", timeout.errorMessage());
    }

    @Test
    void permanentErrorsAndNonRetryableTypesDeadLetterAtOnce() {
        QueueSettings settings = QueueSettings.DEFAULTS.withNonRetryable(List.of(IllegalArgumentException.class));
        Decision plain = Decision.failed(new PermanentException("no such customer"), 1, settings, new Random());
        assertEquals(Decision.Action.DEAD_LETTER, plain.action());
        assertEquals(Outcome.PERMANENT, plain.outcome());
        assertEquals("rdq.Permanent", plain.errorType());
        Decision caused = Decision.failed(new PermanentException("bad", new IOException("x")), 1, settings, new Random());
        assertEquals("java.io.IOException", caused.errorType(), "the cause's type is recorded");
        Decision listed = Decision.failed(new IllegalArgumentException("nope"), 1, settings, new Random());
        assertEquals(Outcome.PERMANENT, listed.outcome());
        Decision after = Decision.failed(new RetryAfterException(Duration.ofSeconds(42)), 1, settings, new Random());
        assertEquals(42.0, after.delay());
        assertEquals("rdq.RetryAfter", after.errorType());
        assertEquals("x".repeat(1999) + "…", Decision.truncate("x".repeat(5000)));
    }
}

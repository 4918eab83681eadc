package io.rdq.worker;

import io.rdq.Outcome;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.math.BigDecimal;
import java.util.List;
import java.util.random.RandomGenerator;

/**
 * What to do with a task after an attempt and what its record says: the classification of
 * rdq's Python engine ({@code rdq._classify}), for Java handlers.
 *
 * <pre>
 * returns                                   SUCCEEDED, complete
 * throws PermanentException / nonRetryable  PERMANENT, dead-letter at once
 * throws RetryAfterException(delay)         FAILED, retry after delay
 * exceeds its timeout                       TIMEOUT, retry after backoff
 * throws anything else                      FAILED, retry after backoff
 * a retry when attempts are used up         dead-letter (the attempt keeps its outcome)
 * </pre>
 */
record Decision(Action action, Outcome outcome, double delay, String errorType, String errorMessage, String traceback) {
    enum Action { COMPLETE, RESCHEDULE, DEAD_LETTER }

    /** Error messages are cut to this many characters before they are stored. */
    static final int MAX_ERROR_MESSAGE = 2000;
    /** No retry is scheduled further out than this (seconds). */
    static final double MAX_DELAY = 366 * 86400.0;
    static final int MAX_TRACEBACK = 32768;

    static final String UNKNOWN_HANDLER = "rdq.UnknownHandler";
    static final String TIMEOUT_ERROR = "rdq.Timeout";
    static final String ATTEMPTS_EXHAUSTED = "rdq.AttemptsExhausted";
    static final String INTERRUPTED_ERROR = "rdq.Interrupted";
    static final String CORRUPT_TASK = "rdq.CorruptTask";

    static final Decision SUCCESS = new Decision(Action.COMPLETE, Outcome.SUCCEEDED, 0, null, null, null);

    static Decision deadLetter(String errorType, String message) {
        return new Decision(Action.DEAD_LETTER, Outcome.PERMANENT, 0, errorType, truncate(message), null);
    }

    static Decision interrupted() {
        return new Decision(Action.RESCHEDULE, Outcome.INTERRUPTED, 0, INTERRUPTED_ERROR,
                "the worker shut down before the handler finished", null);
    }

    static Decision timedOut(int attempt, QueueSettings settings, RandomGenerator random) {
        String seconds = BigDecimal.valueOf(settings.timeout().toNanos() / 1e9).stripTrailingZeros().toPlainString();
        return retry(Outcome.TIMEOUT, TIMEOUT_ERROR, "handler exceeded its timeout of " + seconds + "s", null,
                attempt, settings, null, random);
    }

    /** Classify a failed attempt number {@code attempt} (1-based) under {@code settings}. */
    static Decision failed(Throwable error, int attempt, QueueSettings settings, RandomGenerator random) {
        String trace = traceback(error);
        if (error instanceof PermanentException) {
            Throwable cause = error.getCause();
            String type = cause != null ? typeName(cause) : "rdq.Permanent";
            return new Decision(Action.DEAD_LETTER, Outcome.PERMANENT, 0, type, describe(error), trace);
        }
        List<Class<? extends Throwable>> permanent = settings.nonRetryable();
        for (Class<? extends Throwable> type : permanent) {
            if (type.isInstance(error)) {
                return new Decision(Action.DEAD_LETTER, Outcome.PERMANENT, 0, typeName(error), describe(error), trace);
            }
        }
        Double delay = error instanceof RetryAfterException after ? after.delay().toNanos() / 1e9 : null;
        return retry(Outcome.FAILED, typeName(error), describe(error), trace, attempt, settings, delay, random);
    }

    private static Decision retry(Outcome outcome, String type, String message, String trace, int attempt,
            QueueSettings settings, Double delay, RandomGenerator random) {
        if (attempt >= settings.maxAttempts()) {
            return new Decision(Action.DEAD_LETTER, outcome, 0, type, message, trace);
        }
        double wait = delay != null ? delay : settings.backoff().delay(attempt, random);
        return new Decision(Action.RESCHEDULE, outcome, Math.min(wait, MAX_DELAY), type, message, trace);
    }

    /** The name an exception's type is recorded under: rdq's own by their rdq name, others by
     * their fully qualified Java name. */
    static String typeName(Throwable error) {
        if (error instanceof RetryAfterException) {
            return "rdq.RetryAfter";
        }
        if (error instanceof PermanentException) {
            return "rdq.Permanent";
        }
        return error.getClass().getName();
    }

    static String describe(Throwable error) {
        String text = error.getMessage();
        return truncate(text == null || text.isEmpty() ? error.getClass().getSimpleName() : text);
    }

    static String truncate(String message) {
        if (message == null || message.length() <= MAX_ERROR_MESSAGE) {
            return message;
        }
        return message.substring(0, MAX_ERROR_MESSAGE - 1) + "…";
    }

    /** The stack trace, innermost frames first (as Java prints it), cut to the contract's limit. */
    static String traceback(Throwable error) {
        StringWriter out = new StringWriter();
        error.printStackTrace(new PrintWriter(out));
        String text = out.toString();
        return text.length() <= MAX_TRACEBACK ? text : text.substring(0, MAX_TRACEBACK - 1) + "…";
    }
}

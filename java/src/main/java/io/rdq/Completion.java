package io.rdq;

/**
 * One successful attempt to record with {@link Storage#completeMany}; {@code discard} deletes
 * the task instead of keeping it SUCCEEDED, as {@link Storage#complete(String, String, Attempt,
 * boolean)} does (capability {@code discardSucceeded}).
 */
public record Completion(String taskId, String token, Attempt attempt, boolean discard) {
    /** A completion that keeps its task SUCCEEDED. */
    public Completion(String taskId, String token, Attempt attempt) {
        this(taskId, token, attempt, false);
    }
}

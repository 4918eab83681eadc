package io.rdq;

/** One successful attempt to record with {@link Storage#completeMany}. */
public record Completion(String taskId, String token, Attempt attempt) {}

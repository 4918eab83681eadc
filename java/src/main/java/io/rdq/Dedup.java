package io.rdq;

import java.util.List;

/**
 * How a task submitted with a dedup key is folded into the task that holds the key: the
 * contract's {@code rdq.spi.Dedup} ({@code mode} one of {@link #MODES}; {@code window} and
 * {@code maxAge} in seconds, null for none). See {@link Storage#admit}.
 */
public record Dedup(String key, String mode, Double window, Double maxAge) {
    /** The modes: skip, replace, extend, debounce. */
    public static final List<String> MODES = List.of("skip", "replace", "extend", "debounce");

    /** A key in mode skip, held while its task is live. */
    public static Dedup skip(String key) {
        return new Dedup(key, "skip", null, null);
    }
}

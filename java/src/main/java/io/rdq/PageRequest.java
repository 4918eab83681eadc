package io.rdq;

/** Which page to read: up to {@code limit} items after the opaque {@code cursor} of the
 * previous page (null for the first page). */
public record PageRequest(int limit, String cursor, boolean includeAttempts) {
    public static PageRequest first(int limit) {
        return new PageRequest(limit, null, false);
    }

    public PageRequest next(String cursor) {
        return new PageRequest(limit, cursor, includeAttempts);
    }

    public PageRequest withAttempts() {
        return new PageRequest(limit, cursor, true);
    }
}

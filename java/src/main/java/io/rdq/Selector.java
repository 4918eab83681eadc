package io.rdq;

import java.util.List;

/** What a redrive or purge acts on: an explicit id list or a DLQ filter, never both. */
public record Selector(List<String> ids, DlqFilter filter) {
    public Selector {
        if ((ids == null) == (filter == null)) {
            throw new ValidationException("selector", ids == null ? "give either ids or filter" : "give either ids or filter, not both");
        }
        if (ids != null) {
            ids = java.util.Collections.unmodifiableList(new java.util.ArrayList<>(ids));
        }
    }

    public static Selector ids(List<String> ids) {
        return new Selector(ids, null);
    }

    public static Selector ids(String... ids) {
        return new Selector(List.of(ids), null);
    }

    public static Selector filter(DlqFilter filter) {
        return new Selector(null, filter == null ? DlqFilter.ALL : filter);
    }
}

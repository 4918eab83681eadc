package io.rdq;

import java.util.List;

/** One page of results and the cursor of the next page (null when this page is the last). */
public record Page<T>(List<T> items, String nextCursor) {
    public Page {
        items = List.copyOf(items);
    }

    public boolean isLast() {
        return nextCursor == null;
    }
}

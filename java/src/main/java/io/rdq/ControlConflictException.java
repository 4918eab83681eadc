package io.rdq;

/**
 * A control record changed since the caller read it (its version is not the one expected):
 * nothing was written. {@link #found()} is the record as it is now (null when there is none).
 */
public class ControlConflictException extends StorageException {
    private static final long serialVersionUID = 1L;
    private final String queue;
    private final String key;
    private final transient Control found;

    public ControlConflictException(String queue, String key, Control found) {
        super("control '" + key + "' of queue '" + queue + "' changed meanwhile ("
                + (found == null ? "no such control now" : "version " + found.version() + " now") + ")");
        this.queue = queue;
        this.key = key;
        this.found = found;
    }

    public String queue() {
        return queue;
    }

    public String key() {
        return key;
    }

    public Control found() {
        return found;
    }
}

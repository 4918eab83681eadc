package io.rdq;

/** A page cursor is malformed, or belongs to another queue or filter. */
public class StaleCursorException extends StorageException {
    private static final long serialVersionUID = 1L;
    private final String reason;

    public StaleCursorException(String reason) {
        super("unusable cursor: " + reason);
        this.reason = reason;
    }

    public String reason() {
        return reason;
    }
}

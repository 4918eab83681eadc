package io.rdq.worker;

/**
 * Thrown by a handler to dead-letter its task at once: retrying cannot help. The attempt
 * records the cause's type when there is one, else {@code rdq.Permanent}.
 */
public class PermanentException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public PermanentException(String message) {
        super(message);
    }

    public PermanentException(String message, Throwable cause) {
        super(message, cause);
    }
}

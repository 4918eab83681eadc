package io.rdq;

/** Root of every exception rdq throws. Unchecked, like the errors of rdq's Python side. */
public class RdqException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public RdqException(String message) {
        super(message);
    }

    public RdqException(String message, Throwable cause) {
        super(message, cause);
    }
}

package io.rdq;

/** Input breaks the contract; {@link #field()} names the offending field (a dotted path such
 * as {@code attempt.number} or {@code selector.ids[1]}) when known. */
public class ValidationException extends RdqException {
    private static final long serialVersionUID = 1L;
    private final String field;
    private final String reason;

    public ValidationException(String field, String reason) {
        super(field == null ? reason : field + ": " + reason);
        this.field = field;
        this.reason = reason;
    }

    public String field() {
        return field;
    }

    /** The message without the field name. */
    public String reason() {
        return reason;
    }
}

package io.rdq;

/** Configuration is invalid; {@link #key()} names the offending setting when known. */
public class ConfigException extends RdqException {
    private static final long serialVersionUID = 1L;
    private final String key;
    private final String reason;

    public ConfigException(String key, String reason) {
        super(key == null ? reason : key + ": " + reason);
        this.key = key;
        this.reason = reason;
    }

    public String key() {
        return key;
    }

    public String reason() {
        return reason;
    }
}

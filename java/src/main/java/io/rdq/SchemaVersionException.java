package io.rdq;

/** The database's schema was migrated by a newer rdq than this binding knows: the binding
 * refuses to run on it rather than misread it. */
public class SchemaVersionException extends StorageException {
    private static final long serialVersionUID = 1L;
    private final int found;
    private final int supported;

    public SchemaVersionException(String schema, int found, int supported) {
        super("schema \"" + schema + "\" is at version " + found + ", newer than this rdq-java binding knows ("
                + supported + "); upgrade rdq-java before running it on this database");
        this.found = found;
        this.supported = supported;
    }

    public int found() {
        return found;
    }

    public int supported() {
        return supported;
    }
}

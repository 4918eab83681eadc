package io.rdq;

/** The backend cannot be reached, refused the connection or did not answer in time. Retrying
 * later may succeed. */
public class StorageUnavailableException extends StorageException {
    private static final long serialVersionUID = 1L;

    public StorageUnavailableException(String message) {
        super(message);
    }

    public StorageUnavailableException(String message, Throwable cause) {
        super(message, cause);
    }
}

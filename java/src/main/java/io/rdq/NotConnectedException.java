package io.rdq;

/** The store is not open: it was never connected, or it was closed. */
public class NotConnectedException extends StorageException {
    private static final long serialVersionUID = 1L;
    private final boolean closed;

    public NotConnectedException(String store, boolean closed) {
        super(store + (closed ? " has been closed" : " is not connected") + ": call connect() first");
        this.closed = closed;
    }

    public boolean closed() {
        return closed;
    }
}

package io.rdq;

/** A dedup key is held by a live task of another queue: keys are unique across queues, as ids
 * are. {@link #taskId()} is the holder's id. */
public class DedupConflictException extends IdConflictException {
    private static final long serialVersionUID = 1L;
    private final String key;

    public DedupConflictException(String key, String existingQueue, String taskId) {
        super(taskId, existingQueue, "dedup key '" + key + "' is held by task '" + taskId
                + "' of queue '" + existingQueue + "'");
        this.key = key;
    }

    public String key() {
        return key;
    }
}

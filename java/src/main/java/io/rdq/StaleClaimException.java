package io.rdq;

/** The claim token is not the task's current token: the lease was lost; nothing changed. */
public class StaleClaimException extends StorageException {
    private static final long serialVersionUID = 1L;
    private final String taskId;

    public StaleClaimException(String taskId) {
        super("stale claim on task '" + taskId + "': the lease is no longer held");
        this.taskId = taskId;
    }

    public String taskId() {
        return taskId;
    }
}

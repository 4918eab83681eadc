package io.rdq;

/** A task with this id already exists in another queue. */
public class IdConflictException extends StorageException {
    private static final long serialVersionUID = 1L;
    private final String taskId;
    private final String existingQueue;

    public IdConflictException(String taskId, String existingQueue) {
        this(taskId, existingQueue, "task id '" + taskId + "' already exists in queue '" + existingQueue + "'");
    }

    protected IdConflictException(String taskId, String existingQueue, String message) {
        super(message);
        this.taskId = taskId;
        this.existingQueue = existingQueue;
    }

    public String taskId() {
        return taskId;
    }

    public String existingQueue() {
        return existingQueue;
    }
}

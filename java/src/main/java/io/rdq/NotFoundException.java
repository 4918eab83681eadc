package io.rdq;

/** No task with this id exists. */
public class NotFoundException extends StorageException {
    private static final long serialVersionUID = 1L;
    private final String taskId;

    public NotFoundException(String taskId) {
        super("task '" + taskId + "' not found");
        this.taskId = taskId;
    }

    public String taskId() {
        return taskId;
    }
}

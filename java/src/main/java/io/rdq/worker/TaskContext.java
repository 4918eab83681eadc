package io.rdq.worker;

import io.rdq.Envelope;
import io.rdq.RawJson;
import java.util.Map;

/**
 * What a handler is given: the task, which attempt this is (1-based, counting every attempt
 * since admission or the last redrive), and the id of the worker running it.
 */
public record TaskContext(Envelope task, int attempt, String workerId) {
    public String id() {
        return task.id();
    }

    public String queue() {
        return task.queue();
    }

    public RawJson payload() {
        return task.payload();
    }

    /** The payload converted to {@code type} with Jackson. */
    public <T> T payload(Class<T> type) {
        return task.payload().decode(type);
    }

    public Map<String, String> headers() {
        return task.headers();
    }
}

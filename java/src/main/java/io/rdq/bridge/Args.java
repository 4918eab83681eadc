package io.rdq.bridge;

import com.fasterxml.jackson.core.JsonToken;
import io.rdq.Attempt;
import io.rdq.AuditEntry;
import io.rdq.AuditFilter;
import io.rdq.Completion;
import io.rdq.Control;
import io.rdq.Counts;
import io.rdq.Dedup;
import io.rdq.DlqFilter;
import io.rdq.Envelope;
import io.rdq.PageRequest;
import io.rdq.RawJson;
import io.rdq.Selector;
import io.rdq.Status;
import io.rdq.TaskFilter;
import io.rdq.ValidationException;
import io.rdq.WorkerInfo;
import io.rdq.json.EnvelopeJson;
import io.rdq.json.EnvelopeJson.JsonReader;
import io.rdq.json.Times;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The arguments of one request, each kept as its raw JSON text and decoded on demand into the
 * Java type the operation takes. A value of the wrong JSON type throws
 * {@link ValidationException} naming the argument, as the Python contract's own checks do.
 */
final class Args {
    private final Map<String, RawJson> values;

    private Args(Map<String, RawJson> values) {
        this.values = values;
    }

    static Args read(JsonReader r) {
        Map<String, RawJson> values = new LinkedHashMap<>();
        if (r.token() == JsonToken.VALUE_NULL) {
            return new Args(values);
        }
        if (r.token() != JsonToken.START_OBJECT) {
            throw new ValidationException("args", "must be an object");
        }
        while (r.next() == JsonToken.FIELD_NAME) {
            String name = r.name();
            r.next();
            values.put(name, r.raw());
        }
        return new Args(values);
    }

    private JsonReader reader(String name) {
        RawJson raw = values.getOrDefault(name, RawJson.NULL);
        JsonReader r = new JsonReader(raw.text());
        r.next();
        return r;
    }

    private boolean isNull(String name) {
        RawJson raw = values.get(name);
        return raw == null || raw.isNull();
    }

    String string(String name) {
        try (JsonReader r = reader(name)) {
            return r.string(name);
        }
    }

    String optionalString(String name) {
        try (JsonReader r = reader(name)) {
            return r.optionalString(name);
        }
    }

    /** A boolean argument; {@code false} when absent or null. */
    boolean optionalBool(String name) {
        if (isNull(name)) {
            return false;
        }
        try (JsonReader r = reader(name)) {
            return r.bool(name);
        }
    }

    int integer(String name) {
        try (JsonReader r = reader(name)) {
            return r.integer(name);
        }
    }

    double number(String name) {
        try (JsonReader r = reader(name)) {
            return r.number(name);
        }
    }

    long longValue(String name) {
        try (JsonReader r = reader(name)) {
            return r.longValue(name);
        }
    }

    Instant optionalInstant(String name) {
        if (isNull(name)) {
            return null;
        }
        return instant(name);
    }

    Instant instant(String name) {
        if (isNull(name)) {
            throw new ValidationException(name, "must be a datetime");
        }
        try (JsonReader r = reader(name)) {
            return r.instant(name);
        }
    }

    Duration duration(String name) {
        try (JsonReader r = reader(name)) {
            if (r.token() != JsonToken.VALUE_STRING) {
                throw new ValidationException(name, "must be a duration (timedelta)");
            }
            return Times.parseDuration(r.string(name), name);
        }
    }

    Duration optionalDuration(String name) {
        return isNull(name) ? null : duration(name);
    }

    Envelope envelope(String name) {
        try (JsonReader r = reader(name)) {
            return EnvelopeJson.readEnvelope(r, "");
        }
    }

    List<Envelope> envelopes(String name) {
        try (JsonReader r = reader(name)) {
            if (r.token() != JsonToken.START_ARRAY) {
                throw new ValidationException(name, "must be a list of envelopes");
            }
            List<Envelope> tasks = new ArrayList<>();
            while (r.next() != JsonToken.END_ARRAY) {
                tasks.add(EnvelopeJson.readEnvelope(r, ""));
            }
            return tasks;
        }
    }

    Attempt attempt(String name) {
        try (JsonReader r = reader(name)) {
            return EnvelopeJson.readAttempt(r, name);
        }
    }

    List<String> strings(String name) {
        try (JsonReader r = reader(name)) {
            return strings(r, name);
        }
    }

    private static List<String> strings(JsonReader r, String field) {
        if (r.token() != JsonToken.START_ARRAY) {
            throw new ValidationException(field, "must be a list of strings");
        }
        List<String> out = new ArrayList<>();
        while (r.next() != JsonToken.END_ARRAY) {
            out.add(r.string(field + "[" + out.size() + "]"));
        }
        return out;
    }

    private static Long optionalLong(JsonReader r, String field) {
        return r.token() == JsonToken.VALUE_NULL ? null : r.longValue(field);
    }

    private static RawJson object(JsonReader r, String field) {
        if (r.token() != JsonToken.START_OBJECT) {
            throw new ValidationException(field, "must be an object");
        }
        return r.raw();
    }

    /** A control record ({@code in_use} is the store's and ignored). */
    Control control(String name) {
        try (JsonReader r = reader(name)) {
            if (r.token() != JsonToken.START_OBJECT) {
                throw new ValidationException(name, "must be a control");
            }
            String queue = null;
            String key = null;
            boolean paused = false;
            Long gate = null;
            Long concurrency = null;
            Long rate = null;
            double per = 1.0;
            Long burst = null;
            String fair = null;
            Double aging = null;
            RawJson state = null;
            long version = 0;
            Instant updatedAt = null;
            while (r.next() == JsonToken.FIELD_NAME) {
                String field = r.name();
                r.next();
                String at = name + "." + field;
                switch (field) {
                    case "queue" -> queue = r.string(at);
                    case "key" -> key = r.string(at);
                    case "paused" -> paused = r.bool(at);
                    case "gate" -> gate = optionalLong(r, at);
                    case "concurrency" -> concurrency = optionalLong(r, at);
                    case "rate" -> rate = optionalLong(r, at);
                    case "per" -> per = r.number(at);
                    case "burst" -> burst = optionalLong(r, at);
                    case "fair" -> fair = r.token() == JsonToken.VALUE_NULL ? null : r.string(at);
                    case "aging" -> aging = r.token() == JsonToken.VALUE_NULL ? null : r.number(at);
                    case "state" -> state = object(r, at);
                    case "version" -> version = r.longValue(at);
                    case "updated_at" -> updatedAt = r.instant(at);
                    default -> r.skip();
                }
            }
            return new Control(queue, key, paused, gate, concurrency, rate, per, burst, fair, aging, state, version,
                    updatedAt, null);
        }
    }

    /** A worker's registration ({@code started_at} and {@code seen_at} are the store's). */
    WorkerInfo workerInfo(String name) {
        try (JsonReader r = reader(name)) {
            if (r.token() != JsonToken.START_OBJECT) {
                throw new ValidationException(name, "must be a worker registration");
            }
            String id = null;
            String host = "";
            long pid = 0;
            String version = "";
            List<String> queues = List.of();
            long concurrency = 0;
            long held = 0;
            String state = "running";
            double heartbeat = 10.0;
            RawJson extra = null;
            while (r.next() == JsonToken.FIELD_NAME) {
                String field = r.name();
                r.next();
                String at = name + "." + field;
                switch (field) {
                    case "id" -> id = r.string(at);
                    case "host" -> host = r.string(at);
                    case "pid" -> pid = r.longValue(at);
                    case "version" -> version = r.string(at);
                    case "queues" -> queues = strings(r, at);
                    case "concurrency" -> concurrency = r.longValue(at);
                    case "held" -> held = r.longValue(at);
                    case "state" -> state = r.string(at);
                    case "heartbeat" -> heartbeat = r.number(at);
                    case "extra" -> extra = object(r, at);
                    default -> r.skip();
                }
            }
            return new WorkerInfo(id, host, pid, version, queues, concurrency, held, state, heartbeat, null, null, extra);
        }
    }

    /** Per-minute counts to add. */
    List<Counts> counts(String name) {
        try (JsonReader r = reader(name)) {
            if (r.token() != JsonToken.START_ARRAY) {
                throw new ValidationException(name, "must be a list of counts");
            }
            List<Counts> out = new ArrayList<>();
            while (r.next() != JsonToken.END_ARRAY) {
                String where = name + "[" + out.size() + "]";
                if (r.token() != JsonToken.START_OBJECT) {
                    throw new ValidationException(where, "must be counts");
                }
                String queue = null;
                Instant minute = null;
                long[] numbers = new long[4];
                while (r.next() == JsonToken.FIELD_NAME) {
                    String field = r.name();
                    r.next();
                    String at = where + "." + field;
                    switch (field) {
                        case "queue" -> queue = r.string(at);
                        case "minute" -> minute = r.instant(at);
                        case "succeeded" -> numbers[0] = r.longValue(at);
                        case "failed" -> numbers[1] = r.longValue(at);
                        case "dead" -> numbers[2] = r.longValue(at);
                        case "deferred" -> numbers[3] = r.longValue(at);
                        default -> r.skip();
                    }
                }
                out.add(new Counts(queue, minute, numbers[0], numbers[1], numbers[2], numbers[3]));
            }
            return out;
        }
    }

    List<Completion> completions(String name) {
        try (JsonReader r = reader(name)) {
            if (r.token() != JsonToken.START_ARRAY) {
                throw new ValidationException(name, "must be a list of completions");
            }
            List<Completion> out = new ArrayList<>();
            while (r.next() != JsonToken.END_ARRAY) {
                if (r.token() != JsonToken.START_OBJECT) {
                    throw new ValidationException(name, "must be completion items");
                }
                String taskId = null;
                String token = null;
                Attempt attempt = null;
                boolean discard = false;
                while (r.next() == JsonToken.FIELD_NAME) {
                    String field = r.name();
                    r.next();
                    switch (field) {
                        case "task_id" -> taskId = r.string("id");
                        case "token" -> token = r.string("token");
                        case "attempt" -> attempt = EnvelopeJson.readAttempt(r, "attempt");
                        case "discard" -> discard = r.bool(name + ".discard");
                        default -> r.skip();
                    }
                }
                out.add(new Completion(taskId, token, attempt, discard));
            }
            return out;
        }
    }

    Dedup dedup(String name) {
        try (JsonReader r = reader(name)) {
            if (r.token() != JsonToken.START_OBJECT) {
                throw new ValidationException(name, "must be a dedup setting");
            }
            String key = null;
            String mode = "skip";
            Double window = null;
            Double maxAge = null;
            while (r.next() == JsonToken.FIELD_NAME) {
                String field = r.name();
                r.next();
                switch (field) {
                    case "key" -> key = r.optionalString(name + ".key");
                    case "mode" -> mode = r.optionalString(name + ".mode");
                    case "window" -> window = r.optionalNumber(name + ".window");
                    case "max_age" -> maxAge = r.optionalNumber(name + ".max_age");
                    default -> r.skip();
                }
            }
            return new Dedup(key, mode, window, maxAge);
        }
    }

    PageRequest page(String name) {
        try (JsonReader r = reader(name)) {
            if (r.token() != JsonToken.START_OBJECT) {
                throw new ValidationException(name, "must be a page");
            }
            int limit = 100;
            String cursor = null;
            boolean attempts = false;
            while (r.next() == JsonToken.FIELD_NAME) {
                String field = r.name();
                r.next();
                switch (field) {
                    case "limit" -> limit = r.integer(name + ".limit");
                    case "cursor" -> cursor = r.optionalString(name + ".cursor");
                    case "include_attempts" -> attempts = r.bool(name + ".include_attempts");
                    default -> r.skip();
                }
            }
            return new PageRequest(limit, cursor, attempts);
        }
    }

    DlqFilter dlqFilter(String name) {
        try (JsonReader r = reader(name)) {
            return dlqFilter(r, name);
        }
    }

    private static DlqFilter dlqFilter(JsonReader r, String name) {
        if (r.token() == JsonToken.VALUE_NULL) {
            return null;
        }
        if (r.token() != JsonToken.START_OBJECT) {
            throw new ValidationException(name, "must be a DLQ filter");
        }
        String errorType = null;
        String handlerRef = null;
        Instant after = null;
        Instant before = null;
        while (r.next() == JsonToken.FIELD_NAME) {
            String field = r.name();
            r.next();
            switch (field) {
                case "error_type" -> errorType = r.optionalString(name + ".error_type");
                case "handler_ref" -> handlerRef = r.optionalString(name + ".handler_ref");
                case "dead_lettered_after" -> after = r.instant(name + ".dead_lettered_after");
                case "dead_lettered_before" -> before = r.instant(name + ".dead_lettered_before");
                default -> r.skip();
            }
        }
        return new DlqFilter(errorType, handlerRef, after, before);
    }

    TaskFilter taskFilter(String name) {
        try (JsonReader r = reader(name)) {
            if (r.token() != JsonToken.START_OBJECT) {
                throw new ValidationException(name, "must be a task filter");
            }
            Status status = null;
            String errorType = null;
            String handlerRef = null;
            Instant after = null;
            Instant before = null;
            while (r.next() == JsonToken.FIELD_NAME) {
                String field = r.name();
                r.next();
                switch (field) {
                    case "status" -> status = r.enumValue(Status.class, name + ".status");
                    case "error_type" -> errorType = r.optionalString(name + ".error_type");
                    case "handler_ref" -> handlerRef = r.optionalString(name + ".handler_ref");
                    case "after" -> after = r.instant(name + ".after");
                    case "before" -> before = r.instant(name + ".before");
                    default -> r.skip();
                }
            }
            if (status == null) {
                throw new ValidationException(name + ".status", "must be a status");
            }
            return new TaskFilter(status, errorType, handlerRef, after, before);
        }
    }

    AuditFilter auditFilter(String name) {
        try (JsonReader r = reader(name)) {
            if (r.token() == JsonToken.VALUE_NULL) {
                return null;
            }
            if (r.token() != JsonToken.START_OBJECT) {
                throw new ValidationException(name, "must be an audit filter");
            }
            String queue = null;
            String action = null;
            String actor = null;
            Instant after = null;
            Instant before = null;
            while (r.next() == JsonToken.FIELD_NAME) {
                String field = r.name();
                r.next();
                switch (field) {
                    case "queue" -> queue = r.optionalString(name + ".queue");
                    case "action" -> action = r.optionalString(name + ".action");
                    case "actor" -> actor = r.optionalString(name + ".actor");
                    case "after" -> after = r.instant(name + ".after");
                    case "before" -> before = r.instant(name + ".before");
                    default -> r.skip();
                }
            }
            return new AuditFilter(queue, action, actor, after, before);
        }
    }

    AuditEntry auditEntry(String name) {
        try (JsonReader r = reader(name)) {
            if (r.token() != JsonToken.START_OBJECT) {
                throw new ValidationException(name, "must be an audit entry");
            }
            String actor = null;
            String action = null;
            String queue = null;
            RawJson selector = RawJson.trusted("{}");
            long count = 0;
            String reason = null;
            String error = null;
            while (r.next() == JsonToken.FIELD_NAME) {
                String field = r.name();
                r.next();
                String at = name + "." + field;
                switch (field) {
                    case "actor" -> actor = r.optionalString(at);
                    case "action" -> action = r.optionalString(at);
                    case "queue" -> queue = r.optionalString(at);
                    case "selector" -> {
                        if (r.token() != JsonToken.START_OBJECT) {
                            throw new ValidationException(at, "must be an object");
                        }
                        selector = r.raw();
                    }
                    case "count" -> count = r.longValue(at);
                    case "reason" -> reason = r.optionalString(at);
                    case "error" -> error = r.optionalString(at);
                    default -> r.skip(); // id and time are the store's
                }
            }
            return new AuditEntry(actor, action, queue, selector, count, reason, error, null, null);
        }
    }

    Selector selector(String name) {
        try (JsonReader r = reader(name)) {
            if (r.token() != JsonToken.START_OBJECT) {
                throw new ValidationException(name, "must be a selector");
            }
            List<String> ids = null;
            DlqFilter filter = null;
            while (r.next() == JsonToken.FIELD_NAME) {
                String field = r.name();
                r.next();
                switch (field) {
                    case "ids" -> ids = r.token() == JsonToken.VALUE_NULL ? null : strings(r, name + ".ids");
                    case "filter" -> filter = dlqFilter(r, name + ".filter");
                    default -> r.skip();
                }
            }
            return new Selector(ids, filter);
        }
    }
}

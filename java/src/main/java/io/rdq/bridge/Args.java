package io.rdq.bridge;

import com.fasterxml.jackson.core.JsonToken;
import io.rdq.Attempt;
import io.rdq.AuditEntry;
import io.rdq.AuditFilter;
import io.rdq.Completion;
import io.rdq.DlqFilter;
import io.rdq.Envelope;
import io.rdq.PageRequest;
import io.rdq.RawJson;
import io.rdq.Selector;
import io.rdq.Status;
import io.rdq.TaskFilter;
import io.rdq.ValidationException;
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
                while (r.next() == JsonToken.FIELD_NAME) {
                    String field = r.name();
                    r.next();
                    switch (field) {
                        case "task_id" -> taskId = r.string("id");
                        case "token" -> token = r.string("token");
                        case "attempt" -> attempt = EnvelopeJson.readAttempt(r, "attempt");
                        default -> r.skip();
                    }
                }
                out.add(new Completion(taskId, token, attempt));
            }
            return out;
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

package io.rdq.json;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import io.rdq.Attempt;
import io.rdq.Envelope;
import io.rdq.Outcome;
import io.rdq.RawJson;
import io.rdq.RetryOverride;
import io.rdq.Status;
import io.rdq.ValidationException;
import java.io.IOException;
import java.io.StringWriter;
import java.io.UncheckedIOException;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The JSON form of envelopes and attempt records, the same as rdq's Python
 * {@code rdq.spi.encode_envelope}: snake_case field names, timestamps in RFC 3339, unknown
 * fields written flat beside the known ones. The payload and unknown fields are copied as
 * written, byte for byte. Decoding names the first bad field in its {@link ValidationException}
 * ({@code attempts[0].number}).
 */
public final class EnvelopeJson {
    static final JsonFactory FACTORY = new JsonFactory();

    /** The envelope's own field names; any other top-level key is an unknown field. */
    public static final Set<String> KNOWN = Set.of(
            "id", "queue", "handler_ref", "payload", "headers", "status", "attempt_count", "redrive_count",
            "attempts", "created_at", "next_attempt_at", "lease_expires_at", "completed_at", "dead_lettered_at",
            "retry", "priority", "keys", "claimed_by", "claimed_at", "cancelled_at", "corrupt", "format_version");

    private EnvelopeJson() {}

    // --- encoding ---------------------------------------------------------------------------

    public static String encode(Envelope task) {
        return write(g -> write(g, task));
    }

    public static String encodeAttempt(Attempt attempt) {
        return write(g -> write(g, attempt));
    }

    public static String encodeAttempts(List<Attempt> attempts) {
        return write(g -> {
            g.writeStartArray();
            for (Attempt a : attempts) {
                write(g, a);
            }
            g.writeEndArray();
        });
    }

    public static String encodeRetry(RetryOverride retry) {
        return write(g -> write(g, retry));
    }

    public static String encodeHeaders(Map<String, String> headers) {
        return write(g -> {
            g.writeStartObject();
            for (var h : headers.entrySet()) {
                g.writeStringField(h.getKey(), h.getValue());
            }
            g.writeEndObject();
        });
    }

    /** The unknown fields as one JSON object (how the {@code extra} column stores them). */
    public static String encodeExtra(Map<String, RawJson> extra) {
        return write(g -> {
            g.writeStartObject();
            for (var e : extra.entrySet()) {
                if (!KNOWN.contains(e.getKey())) {
                    g.writeFieldName(e.getKey());
                    g.writeRawValue(e.getValue().text());
                }
            }
            g.writeEndObject();
        });
    }

    /** Writes one JSON value. */
    public interface Writer {
        void write(JsonGenerator generator) throws IOException;
    }

    public static String write(Writer body) {
        StringWriter out = new StringWriter();
        try (JsonGenerator g = FACTORY.createGenerator(out)) {
            body.write(g);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return out.toString();
    }

    public static void write(JsonGenerator g, Envelope t) throws IOException {
        g.writeStartObject();
        g.writeStringField("id", t.id());
        g.writeStringField("queue", t.queue());
        g.writeStringField("handler_ref", t.handlerRef());
        g.writeFieldName("payload");
        g.writeRawValue(t.payload().text());
        g.writeFieldName("headers");
        g.writeStartObject();
        for (var h : t.headers().entrySet()) {
            g.writeStringField(h.getKey(), h.getValue());
        }
        g.writeEndObject();
        g.writeStringField("status", t.status().name());
        g.writeNumberField("attempt_count", t.attemptCount());
        g.writeNumberField("redrive_count", t.redriveCount());
        g.writeFieldName("attempts");
        g.writeStartArray();
        for (Attempt a : t.attempts()) {
            write(g, a);
        }
        g.writeEndArray();
        time(g, "created_at", t.createdAt());
        time(g, "next_attempt_at", t.nextAttemptAt());
        time(g, "lease_expires_at", t.leaseExpiresAt());
        time(g, "completed_at", t.completedAt());
        time(g, "dead_lettered_at", t.deadLetteredAt());
        g.writeFieldName("retry");
        write(g, t.retry());
        g.writeNumberField("priority", t.priority());
        g.writeFieldName("keys");
        g.writeStartArray();
        for (String key : t.keys()) {
            g.writeString(key);
        }
        g.writeEndArray();
        text(g, "claimed_by", t.claimedBy());
        time(g, "claimed_at", t.claimedAt());
        time(g, "cancelled_at", t.cancelledAt());
        text(g, "corrupt", t.corrupt());
        g.writeNumberField("format_version", t.formatVersion());
        for (var e : t.extra().entrySet()) {
            if (!KNOWN.contains(e.getKey())) {
                g.writeFieldName(e.getKey());
                g.writeRawValue(e.getValue().text());
            }
        }
        g.writeEndObject();
    }

    public static void write(JsonGenerator g, Attempt a) throws IOException {
        g.writeStartObject();
        g.writeNumberField("number", a.number());
        g.writeStringField("outcome", a.outcome().name());
        text(g, "error_type", a.errorType());
        text(g, "error_message", a.errorMessage());
        time(g, "started_at", a.startedAt());
        time(g, "finished_at", a.finishedAt());
        text(g, "worker_id", a.workerId());
        text(g, "traceback", a.traceback());
        g.writeEndObject();
    }

    static void write(JsonGenerator g, RetryOverride r) throws IOException {
        if (r == null) {
            g.writeNull();
            return;
        }
        g.writeStartObject();
        if (r.maxAttempts() != null) {
            g.writeNumberField("max_attempts", r.maxAttempts());
        }
        if (r.backoff() != null) {
            g.writeStringField("backoff", r.backoff());
        }
        if (r.base() != null) {
            g.writeNumberField("base", r.base());
        }
        if (r.cap() != null) {
            g.writeNumberField("cap", r.cap());
        }
        if (r.timeout() != null) {
            g.writeNumberField("timeout", r.timeout());
        }
        g.writeEndObject();
    }

    public static void time(JsonGenerator g, String name, Instant at) throws IOException {
        if (at == null) {
            g.writeNullField(name);
        } else {
            g.writeStringField(name, Times.format(at));
        }
    }

    public static void text(JsonGenerator g, String name, String value) throws IOException {
        if (value == null) {
            g.writeNullField(name);
        } else {
            g.writeStringField(name, value);
        }
    }

    // --- decoding ---------------------------------------------------------------------------

    /** An envelope from its JSON text; unknown fields go to {@code extra}. */
    public static Envelope decode(String json) {
        try (JsonReader r = new JsonReader(json)) {
            r.next();
            Envelope task = readEnvelope(r, "");
            if (r.next() != null) {
                throw new ValidationException("envelope", "trailing data after the envelope");
            }
            return task;
        }
    }

    /** Reads the envelope object at the reader's current token. {@code path} prefixes field names. */
    public static Envelope readEnvelope(JsonReader r, String path) {
        if (r.token() != JsonToken.START_OBJECT) {
            throw new ValidationException(path.isEmpty() ? "envelope" : path, "an envelope must be a JSON object");
        }
        String id = null;
        String queue = null;
        String handlerRef = null;
        Envelope.Builder b = Envelope.builder(null, null, null);
        Map<String, RawJson> extra = new LinkedHashMap<>();
        while (r.next() == JsonToken.FIELD_NAME) {
            String name = r.name();
            r.next();
            String field = path + name;
            switch (name) {
                case "id" -> id = r.string(field);
                case "queue" -> queue = r.string(field);
                case "handler_ref" -> handlerRef = r.string(field);
                case "payload" -> b.payload(r.raw());
                case "headers" -> b.headers(readHeaders(r, field));
                case "status" -> b.status(r.enumValue(Status.class, field));
                case "attempt_count" -> b.attemptCount(r.integer(field));
                case "redrive_count" -> b.redriveCount(r.integer(field));
                case "attempts" -> b.attempts(readAttempts(r, field));
                case "created_at" -> b.createdAt(r.instant(field));
                case "next_attempt_at" -> b.nextAttemptAt(r.instant(field));
                case "lease_expires_at" -> b.leaseExpiresAt(r.instant(field));
                case "completed_at" -> b.completedAt(r.instant(field));
                case "dead_lettered_at" -> b.deadLetteredAt(r.instant(field));
                case "retry" -> b.retry(readRetry(r, field));
                case "priority" -> b.priority(r.integer(field));
                case "keys" -> b.keys(readStrings(r, field));
                case "claimed_by" -> b.claimedBy(r.optionalString(field));
                case "claimed_at" -> b.claimedAt(r.instant(field));
                case "cancelled_at" -> b.cancelledAt(r.instant(field));
                case "corrupt" -> b.corrupt(r.optionalString(field));
                case "format_version" -> b.formatVersion(r.integer(field));
                default -> extra.put(name, r.raw());
            }
        }
        if (id == null) {
            throw new ValidationException(path + "id", "missing required field");
        }
        if (queue == null) {
            throw new ValidationException(path + "queue", "missing required field");
        }
        if (handlerRef == null) {
            throw new ValidationException(path + "handler_ref", "missing required field");
        }
        return b.id(id).queue(queue).handlerRef(handlerRef).extra(extra).build();
    }

    /** A JSON array of strings ({@code field[i]} names a bad element). */
    public static List<String> readStrings(JsonReader r, String field) {
        if (r.token() != JsonToken.START_ARRAY) {
            throw new ValidationException(field, "must be a list of strings");
        }
        List<String> out = new ArrayList<>();
        while (r.next() != JsonToken.END_ARRAY) {
            out.add(r.string(field + "[" + out.size() + "]"));
        }
        return out;
    }

    static Map<String, String> readHeaders(JsonReader r, String field) {
        if (r.token() != JsonToken.START_OBJECT) {
            throw new ValidationException(field, "must be an object of strings");
        }
        Map<String, String> headers = new LinkedHashMap<>();
        while (r.next() == JsonToken.FIELD_NAME) {
            String name = r.name();
            r.next();
            headers.put(name, r.string(field + "." + name));
        }
        return headers;
    }

    public static List<Attempt> decodeAttempts(String json) {
        try (JsonReader r = new JsonReader(json)) {
            r.next();
            return readAttempts(r, "attempts");
        }
    }

    public static Attempt decodeAttempt(String json, String field) {
        try (JsonReader r = new JsonReader(json)) {
            r.next();
            return readAttempt(r, field);
        }
    }

    public static Map<String, String> decodeHeaders(String json) {
        try (JsonReader r = new JsonReader(json)) {
            r.next();
            return readHeaders(r, "headers");
        }
    }

    public static RetryOverride decodeRetry(String json) {
        try (JsonReader r = new JsonReader(json)) {
            r.next();
            return readRetry(r, "retry");
        }
    }

    /** The unknown fields stored as one JSON object. */
    public static Map<String, RawJson> decodeExtra(String json) {
        try (JsonReader r = new JsonReader(json)) {
            if (r.next() != JsonToken.START_OBJECT) {
                throw new ValidationException("extra", "must be an object");
            }
            Map<String, RawJson> extra = new LinkedHashMap<>();
            while (r.next() == JsonToken.FIELD_NAME) {
                String name = r.name();
                r.next();
                extra.put(name, r.raw());
            }
            return extra;
        }
    }

    static List<Attempt> readAttempts(JsonReader r, String field) {
        if (r.token() != JsonToken.START_ARRAY) {
            throw new ValidationException(field, "must be an array of attempt records");
        }
        List<Attempt> attempts = new ArrayList<>();
        while (r.next() != JsonToken.END_ARRAY) {
            attempts.add(readAttempt(r, field + "[" + attempts.size() + "]"));
        }
        return attempts;
    }

    public static Attempt readAttempt(JsonReader r, String field) {
        if (r.token() != JsonToken.START_OBJECT) {
            throw new ValidationException(field, "an attempt record must be an object");
        }
        Integer number = null;
        Outcome outcome = null;
        String errorType = null;
        String errorMessage = null;
        Instant startedAt = null;
        Instant finishedAt = null;
        String workerId = null;
        String traceback = null;
        while (r.next() == JsonToken.FIELD_NAME) {
            String name = r.name();
            r.next();
            String at = field + "." + name;
            switch (name) {
                case "number" -> number = r.integer(at);
                case "outcome" -> outcome = r.enumValue(Outcome.class, at);
                case "error_type" -> errorType = r.optionalString(at);
                case "error_message" -> errorMessage = r.optionalString(at);
                case "started_at" -> startedAt = r.instant(at);
                case "finished_at" -> finishedAt = r.instant(at);
                case "worker_id" -> workerId = r.optionalString(at);
                case "traceback" -> traceback = r.optionalString(at);
                default -> r.skip(); // records of a newer writer may carry more
            }
        }
        if (number == null) {
            throw new ValidationException(field + ".number", "missing required field");
        }
        if (outcome == null) {
            throw new ValidationException(field + ".outcome", "missing required field");
        }
        return new Attempt(number, outcome, errorType, errorMessage, startedAt, finishedAt, workerId, traceback);
    }

    static RetryOverride readRetry(JsonReader r, String field) {
        if (r.token() == JsonToken.VALUE_NULL) {
            return null;
        }
        if (r.token() != JsonToken.START_OBJECT) {
            throw new ValidationException(field, "must be an object or null");
        }
        Integer maxAttempts = null;
        String backoff = null;
        Double base = null;
        Double cap = null;
        Double timeout = null;
        while (r.next() == JsonToken.FIELD_NAME) {
            String name = r.name();
            r.next();
            String at = field + "." + name;
            switch (name) {
                case "max_attempts" -> maxAttempts = r.optionalInteger(at);
                case "backoff" -> backoff = r.optionalString(at);
                case "base" -> base = r.optionalNumber(at);
                case "cap" -> cap = r.optionalNumber(at);
                case "timeout" -> timeout = r.optionalNumber(at);
                default -> r.skip(); // settings of a newer writer, as rdq's Python decoder skips them
            }
        }
        return new RetryOverride(maxAttempts, backoff, base, cap, timeout);
    }

    /** A pull parser over one JSON text that can hand out the raw text of any value. */
    public static final class JsonReader implements AutoCloseable {
        private final String text;
        private final JsonParser parser;

        public JsonReader(String text) {
            this.text = text;
            try {
                this.parser = FACTORY.createParser(text);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }

        public JsonToken next() {
            try {
                return parser.nextToken();
            } catch (IOException e) {
                throw new ValidationException("json", "malformed JSON: " + e.getMessage().lines().findFirst().orElse(""));
            }
        }

        public JsonToken token() {
            return parser.currentToken();
        }

        public String name() {
            try {
                return parser.currentName();
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }

        /** The raw text of the value at the current token (its whole subtree). */
        public RawJson raw() {
            try {
                int start = (int) parser.currentTokenLocation().getCharOffset();
                parser.skipChildren();
                parser.finishToken();
                int end = (int) parser.currentLocation().getCharOffset();
                return RawJson.trusted(text.substring(start, end));
            } catch (IOException e) {
                throw new ValidationException("json", "malformed JSON: " + e.getMessage());
            }
        }

        public void skip() {
            try {
                parser.skipChildren();
            } catch (IOException e) {
                throw new ValidationException("json", "malformed JSON: " + e.getMessage());
            }
        }

        public String string(String field) {
            if (token() != JsonToken.VALUE_STRING) {
                throw new ValidationException(field, "must be a string");
            }
            return textValue();
        }

        public String optionalString(String field) {
            return token() == JsonToken.VALUE_NULL ? null : string(field);
        }

        private String textValue() {
            try {
                return parser.getText();
            } catch (IOException e) {
                throw new ValidationException("json", "malformed JSON: " + e.getMessage());
            }
        }

        public int integer(String field) {
            if (token() != JsonToken.VALUE_NUMBER_INT) {
                throw new ValidationException(field, "must be an integer");
            }
            try {
                if (parser.getNumberType() != JsonParser.NumberType.INT) {
                    throw new ValidationException(field, "is out of range");
                }
                return parser.getIntValue();
            } catch (IOException e) {
                throw new ValidationException(field, "must be an integer");
            }
        }

        public Integer optionalInteger(String field) {
            return token() == JsonToken.VALUE_NULL ? null : integer(field);
        }

        public long longValue(String field) {
            if (token() != JsonToken.VALUE_NUMBER_INT) {
                throw new ValidationException(field, "must be an integer");
            }
            try {
                return parser.getLongValue();
            } catch (IOException e) {
                throw new ValidationException(field, "is out of range");
            }
        }

        public double number(String field) {
            if (token() != JsonToken.VALUE_NUMBER_INT && token() != JsonToken.VALUE_NUMBER_FLOAT) {
                throw new ValidationException(field, "must be a number");
            }
            try {
                return parser.getDoubleValue();
            } catch (IOException e) {
                throw new ValidationException(field, "must be a number");
            }
        }

        public Double optionalNumber(String field) {
            return token() == JsonToken.VALUE_NULL ? null : number(field);
        }

        public boolean bool(String field) {
            if (token() == JsonToken.VALUE_TRUE) {
                return true;
            }
            if (token() == JsonToken.VALUE_FALSE) {
                return false;
            }
            throw new ValidationException(field, "must be a boolean");
        }

        public Instant instant(String field) {
            if (token() == JsonToken.VALUE_NULL) {
                return null;
            }
            return Times.parse(string(field), field);
        }

        public <E extends Enum<E>> E enumValue(Class<E> type, String field) {
            String value = string(field);
            try {
                return Enum.valueOf(type, value);
            } catch (IllegalArgumentException e) {
                throw new ValidationException(field, "unknown " + type.getSimpleName().toLowerCase() + " '" + value + "'");
            }
        }

        @Override
        public void close() {
            try {
                parser.close();
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
    }
}

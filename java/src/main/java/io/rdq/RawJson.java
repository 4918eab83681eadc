package io.rdq;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.charset.StandardCharsets;

/**
 * A JSON value kept exactly as written (key order, number spelling, escapes), as rdq stores
 * payloads and unknown envelope fields. Equal when the texts are equal.
 */
public final class RawJson {
    private static final ObjectMapper MAPPER = new ObjectMapper();

    /** JSON {@code null}. */
    public static final RawJson NULL = new RawJson("null");

    private final String text;

    private RawJson(String text) {
        this.text = text;
    }

    /** Wrap JSON text; throws {@link ValidationException} if it is not one JSON value. */
    public static RawJson of(String text) {
        if (text == null) {
            return NULL;
        }
        try (var parser = MAPPER.getFactory().createParser(text)) {
            if (parser.nextToken() == null) {
                throw new ValidationException(null, "empty JSON text");
            }
            parser.skipChildren();
            if (parser.nextToken() != null) {
                throw new ValidationException(null, "more than one JSON value");
            }
        } catch (JsonProcessingException e) {
            throw new ValidationException(null, "not valid JSON: " + e.getOriginalMessage());
        } catch (java.io.IOException e) {
            throw new ValidationException(null, "not valid JSON: " + e.getMessage());
        }
        return new RawJson(text);
    }

    /** Wrap text known to be one valid JSON value (read from the database or a parser). */
    public static RawJson trusted(String text) {
        return new RawJson(text);
    }

    /** The JSON encoding of {@code value} (a tree, a map, a record, a string, a number...). */
    public static RawJson encode(Object value) {
        try {
            return new RawJson(MAPPER.writeValueAsString(value));
        } catch (java.io.IOException e) {
            throw new ValidationException(null, "is not JSON-serializable: " + e.getMessage());
        }
    }

    public String text() {
        return text;
    }

    /** Size of the UTF-8 encoding in bytes. */
    public int byteLength() {
        return text.getBytes(StandardCharsets.UTF_8).length;
    }

    /** How deeply the value nests arrays and objects (0 for a scalar, 1 for {@code []}),
     * counted by a streaming parser: no depth makes it recurse. */
    public int depth() {
        int depth = 0;
        int deepest = 0;
        try (var parser = MAPPER.getFactory().createParser(text)) {
            for (var token = parser.nextToken(); token != null; token = parser.nextToken()) {
                if (token.isStructStart()) {
                    deepest = Math.max(deepest, ++depth);
                } else if (token.isStructEnd()) {
                    depth--;
                }
            }
        } catch (java.io.IOException e) {
            throw new IllegalStateException("JSON text does not parse", e);
        }
        return deepest;
    }

    public boolean isNull() {
        return "null".equals(text.strip());
    }

    /** The value as a Jackson tree. */
    public JsonNode tree() {
        try {
            return MAPPER.readTree(text);
        } catch (JsonProcessingException e) {
            throw new IllegalStateException("stored JSON does not parse", e);
        }
    }

    /** The value converted to {@code type} with Jackson. */
    public <T> T decode(Class<T> type) {
        try {
            return MAPPER.readValue(text, type);
        } catch (JsonProcessingException e) {
            throw new ValidationException("payload", "does not convert to " + type.getSimpleName() + ": " + e.getOriginalMessage());
        }
    }

    @Override
    public boolean equals(Object other) {
        return other instanceof RawJson raw && raw.text.equals(text);
    }

    @Override
    public int hashCode() {
        return text.hashCode();
    }

    @Override
    public String toString() {
        return text;
    }
}

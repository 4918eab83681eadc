package io.rdq;

import io.rdq.json.EnvelopeJson;
import io.rdq.json.Times;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Instant;
import java.util.Base64;
import java.util.HexFormat;

/**
 * Opaque keyset cursors {@code (time, id)} bound to a scope (a queue and filter): a page never
 * skips or repeats an item while new ones arrive, and a cursor used with another queue or
 * filter, or tampered with, throws {@link StaleCursorException}.
 */
public final class Cursors {
    private static final int VERSION = 1;

    /** The position after which the next page starts. */
    public record Position(Instant at, String id) {}

    private Cursors() {}

    /** A scope from the parts that define a listing (queue, filter fields; nulls allowed). */
    public static String scope(String kind, Object... parts) {
        String json = EnvelopeJson.write(g -> {
            g.writeStartArray();
            g.writeString(kind);
            for (Object part : parts) {
                if (part == null) {
                    g.writeNull();
                } else if (part instanceof Instant at) {
                    g.writeString(Times.format(at));
                } else {
                    g.writeString(part.toString());
                }
            }
            g.writeEndArray();
        });
        try {
            byte[] digest = MessageDigest.getInstance("SHA-256").digest(json.getBytes(StandardCharsets.UTF_8));
            return kind + ":" + HexFormat.of().formatHex(digest, 0, 8);
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    public static String encode(String scope, Instant at, String id) {
        String json = EnvelopeJson.write(g -> {
            g.writeStartArray();
            g.writeNumber(VERSION);
            g.writeString(scope);
            g.writeString(Times.format(at));
            g.writeString(id);
            g.writeEndArray();
        });
        return Base64.getUrlEncoder().withoutPadding().encodeToString(json.getBytes(StandardCharsets.UTF_8));
    }

    public static Position decode(String cursor, String scope) {
        String json;
        try {
            json = new String(Base64.getUrlDecoder().decode(cursor), StandardCharsets.UTF_8);
        } catch (IllegalArgumentException e) {
            throw new StaleCursorException("malformed cursor");
        }
        try {
            var node = new com.fasterxml.jackson.databind.ObjectMapper().readTree(json);
            if (node == null || !node.isArray() || node.size() != 4 || !node.get(0).isInt()
                    || !node.get(1).isTextual() || !node.get(2).isTextual() || !node.get(3).isTextual()) {
                throw new StaleCursorException("malformed cursor");
            }
            if (node.get(0).asInt() != VERSION) {
                throw new StaleCursorException("cursor version " + node.get(0).asInt() + " is not supported");
            }
            if (!node.get(1).asText().equals(scope)) {
                throw new StaleCursorException("cursor belongs to another queue or filter");
            }
            Position position = new Position(Times.parse(node.get(2).asText(), "cursor"), node.get(3).asText());
            if (!encode(scope, position.at(), position.id()).equals(cursor)) {
                throw new StaleCursorException("malformed cursor"); // trailing or altered bytes
            }
            return position;
        } catch (com.fasterxml.jackson.core.JsonProcessingException | ValidationException e) {
            throw new StaleCursorException("malformed cursor");
        }
    }
}

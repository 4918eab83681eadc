package io.rdq.postgres;

import io.rdq.IdConflictException;
import io.rdq.StorageException;
import io.rdq.StorageUnavailableException;
import java.sql.SQLException;
import java.util.Map;

/** JDBC exceptions mapped to rdq's exceptions at the store's boundary. */
final class Errors {
    /** Raised by id_conflict() (migration 0002): DETAIL is {"id": ..., "queue": ...}. */
    static final String ID_CONFLICT = "RQ409";
    /** Raised by unrestricted() (migration 0005): claim.sql refuses a queue a control
     * restricts; claim_controlled.sql claims it. */
    static final String CONTROLLED = "RQ423";

    // SQLSTATE classes and codes meaning "the server is not there (now)", and 57014: the
    // statement ran past the operation timeout (statement_timeout).
    private static final String[] UNAVAILABLE = {"08", "57P01", "57P02", "57P03", "53300", "25006", "28", "3D000", "57014"};
    // undefined table, function or column: the schema is missing or older than this code
    private static final String[] SCHEMA_BEHIND = {"42P01", "42883", "42703"};

    private Errors() {}

    static boolean unavailable(SQLException e) {
        String state = e.getSQLState();
        if (state == null) {
            // the driver's own I/O failures (socket timeout, connection reset) carry no state
            // or 08xxx; a null state with an I/O cause is a lost connection
            return e.getCause() instanceof java.io.IOException;
        }
        for (String prefix : UNAVAILABLE) {
            if (state.startsWith(prefix)) {
                return true;
            }
        }
        return false;
    }

    /** True if the connection that raised {@code e} must not be reused. */
    static boolean broken(SQLException e) {
        String state = e.getSQLState();
        return state == null || state.startsWith("08") || state.startsWith("57P");
    }

    static RuntimeException translate(SQLException e, String endpoint) {
        String state = e.getSQLState();
        if (ID_CONFLICT.equals(state)) {
            Map<String, String> detail = detail(e);
            if (detail.containsKey("id") && detail.containsKey("queue")) {
                return new IdConflictException(detail.get("id"), detail.get("queue"));
            }
        }
        String reason = reason(e);
        if (unavailable(e)) {
            return new StorageUnavailableException("PostgreSQL at " + endpoint + " is unavailable: " + reason, e);
        }
        for (String behind : SCHEMA_BEHIND) {
            if (behind.equals(state)) {
                reason += "; is the schema migrated? run `rdq migrate --storage URL` (or storage.migrate())";
            }
        }
        return new StorageException("PostgreSQL at " + endpoint + ": " + reason, e);
    }

    private static String reason(SQLException e) {
        String text = e.getMessage() == null ? "" : e.getMessage().strip().lines().findFirst().orElse("");
        String state = e.getSQLState() == null ? "" : " [" + e.getSQLState() + "]";
        return e.getClass().getSimpleName() + state + (text.isEmpty() ? "" : ": " + text);
    }

    private static Map<String, String> detail(SQLException e) {
        if (e instanceof org.postgresql.util.PSQLException pe && pe.getServerErrorMessage() != null) {
            String detail = pe.getServerErrorMessage().getDetail();
            if (detail != null) {
                try {
                    var node = new com.fasterxml.jackson.databind.ObjectMapper().readTree(detail);
                    if (node.path("id").isTextual() && node.path("queue").isTextual()) {
                        return Map.of("id", node.get("id").asText(), "queue", node.get("queue").asText());
                    }
                } catch (com.fasterxml.jackson.core.JsonProcessingException ignored) {
                    // not the detail id_conflict() writes: reported as a plain error
                }
            }
        }
        return Map.of();
    }
}

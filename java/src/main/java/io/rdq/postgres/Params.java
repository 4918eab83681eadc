package io.rdq.postgres;

import java.sql.Array;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.sql.Types;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.HashMap;
import java.util.Map;

/** Named statement arguments, bound to a statement's {@code ?} placeholders in order. */
final class Params {
    private final Map<String, Object> values = new HashMap<>();

    static Params of() {
        return new Params();
    }

    Params set(String name, Object value) {
        values.put(name, value);
        return this;
    }

    PreparedStatement prepare(Connection conn, Sql.Statement statement) throws SQLException {
        PreparedStatement ps = conn.prepareStatement(statement.text());
        try {
            int i = 1;
            for (String name : statement.params()) {
                if (!values.containsKey(name)) {
                    throw new IllegalStateException(statement.name() + ".sql needs :" + name);
                }
                bind(conn, ps, i++, values.get(name));
            }
            return ps;
        } catch (SQLException | RuntimeException e) {
            ps.close();
            throw e;
        }
    }

    private static void bind(Connection conn, PreparedStatement ps, int i, Object value) throws SQLException {
        if (value == null) {
            ps.setNull(i, Types.NULL);
        } else if (value instanceof String s) {
            ps.setString(i, s);
        } else if (value instanceof Integer n) {
            ps.setInt(i, n);
        } else if (value instanceof Long n) {
            ps.setLong(i, n);
        } else if (value instanceof Double d) {
            ps.setDouble(i, d);
        } else if (value instanceof Boolean b) {
            ps.setBoolean(i, b);
        } else if (value instanceof Instant at) {
            ps.setObject(i, OffsetDateTime.ofInstant(at, ZoneOffset.UTC));
        } else if (value instanceof String[] texts) {
            Array array = conn.createArrayOf("text", texts);
            ps.setArray(i, array);
        } else if (value instanceof Integer[] numbers) {
            Array array = conn.createArrayOf("integer", numbers);
            ps.setArray(i, array);
        } else if (value instanceof Boolean[] flags) {
            Array array = conn.createArrayOf("boolean", flags);
            ps.setArray(i, array);
        } else if (value instanceof Long[] numbers) {
            Array array = conn.createArrayOf("bigint", numbers);
            ps.setArray(i, array);
        } else {
            throw new IllegalArgumentException("cannot bind a " + value.getClass().getSimpleName());
        }
    }
}

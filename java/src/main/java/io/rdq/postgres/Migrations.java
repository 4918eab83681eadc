package io.rdq.postgres;


import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.zip.CRC32;

/**
 * The schema's numbered migrations: the very files of the Python plugin
 * ({@code rdq_postgres/sql/migrations/NNNN_name.sql}), bundled into the jar by the build, so
 * both languages create the same schema. This binding applies and accepts versions up to
 * {@link #SUPPORTED} only: a schema migrated further by a newer rdq is refused.
 */
final class Migrations {
    /** The schema version this binding's statements are written for. */
    static final int SUPPORTED = 20;

    record Migration(int version, String name, String sql) {}

    private Migrations() {}

    /** The bundled migrations up to {@link #SUPPORTED}, in order. */
    static List<Migration> bundled(Sql sql) {
        List<Migration> found = new ArrayList<>();
        for (String file : Sql.read("sql/migrations/index.txt").split("\\R")) {
            file = file.strip();
            if (!file.matches("\\d{4}_[a-z0-9_]+\\.sql")) {
                continue;
            }
            int version = Integer.parseInt(file.substring(0, 4));
            if (version <= SUPPORTED) {
                String name = file.substring(5, file.length() - 4);
                found.add(new Migration(version, name, sql.render(Sql.read("sql/migrations/" + file))));
            }
        }
        found.sort((a, b) -> Integer.compare(a.version(), b.version()));
        Set<Integer> held = new HashSet<>();
        for (Migration m : found) {
            if (!held.add(m.version())) {
                throw new IllegalStateException("the jar holds migration " + m.version() + " twice (rebuild it)");
            }
        }
        for (int v = 1; v <= SUPPORTED; v++) {
            if (!held.contains(v)) {
                throw new IllegalStateException("the jar lacks migration " + v + " (rebuild it)");
            }
        }
        return found;
    }

    /** The advisory lock key serialising migrations of {@code schema}, the same number the
     * Python plugin uses (CRC-32 of {@code rdq.migrate.<schema>}, 31 bits). */
    static long lockKey(String schema) {
        CRC32 crc = new CRC32();
        crc.update(("rdq.migrate." + schema).getBytes(java.nio.charset.StandardCharsets.UTF_8));
        return crc.getValue() & 0x7FFFFFFFL;
    }

    /** The highest applied version, 0 when the schema was never migrated. */
    static int current(Connection conn, Sql sql) throws SQLException {
        try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery(sql.get("schema_exists").text())) {
            rs.next();
            if (!rs.getBoolean("migrated")) {
                return 0;
            }
        }
        try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery(sql.get("schema_version").text())) {
            rs.next();
            return rs.getInt("version");
        }
    }

    private static void lock(Connection conn, Sql sql, String statement, long key) throws SQLException {
        try (PreparedStatement ps = Params.of().set("key", key).prepare(conn, sql.get(statement))) {
            ps.execute();
        }
    }

    /** Refuse a schema newer than this binding knows. */
    static void check(int version, String schema) {
        if (version > SUPPORTED) {
            throw new io.rdq.SchemaVersionException(schema, version, SUPPORTED);
        }
    }

    /** Apply every migration not yet recorded, each in its own transaction, under the same
     * session advisory lock as the Python plugin (other migrators wait). Returns the migrations
     * applied, named as their files are ({@code 0003_second_revision}), in order. */
    static List<String> apply(Connection conn, Sql sql, String schema) throws SQLException {
        long key = lockKey(schema);
        lock(conn, sql, "migrate_lock", key);
        try {
            try (Statement st = conn.createStatement()) {
                st.execute(sql.script("migrate_prepare"));
            }
            Set<Integer> done = new HashSet<>();
            try (Statement st = conn.createStatement();
                    ResultSet rs = st.executeQuery(sql.get("migrations_applied").text())) {
                while (rs.next()) {
                    done.add(rs.getInt("version"));
                }
            }
            check(done.stream().mapToInt(Integer::intValue).max().orElse(0), schema);
            List<String> applied = new ArrayList<>();
            for (Migration m : bundled(sql)) {
                if (done.contains(m.version())) {
                    continue;
                }
                conn.setAutoCommit(false);
                try {
                    try (Statement st = conn.createStatement()) {
                        st.execute(m.sql());
                    }
                    try (PreparedStatement ins = Params.of().set("version", m.version()).set("name", m.name())
                            .prepare(conn, sql.get("migration_record"))) {
                        ins.execute();
                    }
                    conn.commit();
                } catch (SQLException | RuntimeException e) {
                    conn.rollback();
                    throw e;
                } finally {
                    conn.setAutoCommit(true);
                }
                applied.add(String.format("%04d_%s", m.version(), m.name()));
            }
            return applied;
        } finally {
            lock(conn, sql, "migrate_unlock", key);
        }
    }

}

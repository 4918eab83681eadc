package io.rdq.postgres;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class SqlTest {
    @Test
    void namedParametersBecomePlaceholdersInOrderAndCastsAndTextStay() {
        Sql.Statement s = Sql.parse("t", "-- :not_a_param\nSELECT :a::text, ':b', \"x:y\", x::int FROM t WHERE y = :a AND z = :c_2");
        assertEquals("SELECT ?::text, ':b', \"x:y\", x::int FROM t WHERE y = ? AND z = ?", s.text());
        assertEquals(List.of("a", "a", "c_2"), s.params());
    }

    @Test
    void commentsGoAndACommentLineGoesWithItsLineBreak() {
        assertEquals("SELECT 1,\n  2 \nFROM t WHERE x = '-- kept'",
                Sql.uncommented("-- a\nSELECT 1,\n  -- b\n  2 -- c\nFROM t WHERE x = '-- kept'"));
    }

    @Test
    void everyStatementRendersForItsSchema() {
        Sql sql = new Sql("kit_1", "kit_1_due");
        for (String name : List.of("claim", "complete", "complete_many", "reschedule", "dead_letter", "enqueue",
                "enqueue_batch", "enqueue_batch_fresh", "import_tasks", "extend_lease", "get", "stats", "notify",
                "redrive_filter", "purge_filter", "schema_exists", "schema_version", "migration_record")) {
            String text = sql.get(name).text();
            assertFalse(text.matches("(?s).*\\{[a-z_]+}.*"), name + ": " + text);
            assertFalse(text.contains("--"), name);
        }
        assertTrue(sql.get("notify").text().contains("'kit_1_due'"));
        assertTrue(sql.script("migrate_prepare").contains("CREATE SCHEMA IF NOT EXISTS \"kit_1\""));
    }

    @Test
    void fragmentsAndSlotsAreFilledIn() {
        Sql sql = new Sql("kit_1", "kit_1_due");
        Sql.Statement first = sql.get("list_tasks", Map.of("status", "DEAD", "at", "dead_lettered_at", "keyset", ""));
        Sql.Statement next = sql.get("list_tasks",
                Map.of("status", "DEAD", "at", "dead_lettered_at", "keyset", "{task_keyset}"));
        assertTrue(next.text().contains("AND (dead_lettered_at, id) > (?::timestamptz, ?::text)"), next.text());
        assertFalse(first.text().contains("cursor"));
        assertEquals(List.of("cursor_at", "cursor_id"), next.params().subList(2, 4));
        assertTrue(sql.get("complete").text().contains("\"kit_1\".append_attempt(t.attempts, i.attempt)"));
        assertTrue(sql.get("enqueue_batch").text().contains("AS present"));
    }

    @Test
    void theMigrationLockIsTheOneThePythonPluginTakes() {
        // zlib.crc32(b"rdq.migrate.rdq") & 0x7FFFFFFF
        assertEquals(1198796939L, Migrations.lockKey("rdq"));
    }
}

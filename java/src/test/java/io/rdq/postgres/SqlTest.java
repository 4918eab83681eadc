package io.rdq.postgres;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.List;
import org.junit.jupiter.api.Test;

class SqlTest {
    @Test
    void namedParametersBecomePlaceholdersInOrderAndCastsAndTextStay() {
        Sql.Statement s = Sql.parse("t", "-- :not_a_param\nSELECT :a::text, ':b', x::int FROM t WHERE y = :a AND z = :c_2");
        assertEquals("SELECT ?::text, ':b', x::int FROM t WHERE y = ? AND z = ?", s.text());
        assertEquals(List.of("a", "a", "c_2"), s.params());
    }

    @Test
    void everyStatementRendersForItsSchema() {
        Sql sql = new Sql("kit_1", "kit_1_due");
        for (String name : List.of("claim", "complete", "reschedule", "dead_letter", "enqueue", "enqueue_batch",
                "extend_lease", "get", "stats", "dlq_first", "dlq_next", "notify")) {
            String text = sql.get(name).text();
            assertEquals(false, text.contains("{schema}"), name);
        }
        assertEquals(true, sql.get("notify").text().contains("'kit_1_due'"));
    }

    @Test
    void theMigrationLockIsTheOneThePythonPluginTakes() {
        // zlib.crc32(b"rdq.migrate.rdq") & 0x7FFFFFFF
        assertEquals(1198796939L, Migrations.lockKey("rdq"));
    }
}

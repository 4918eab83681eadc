package io.rdq.postgres;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.util.Properties;
import org.junit.jupiter.api.Test;

/** The operation timeout as docs/postgres-schema.md asks a binding to enforce it. */
class PostgresConfigTest {
    @Test
    void theServerStopsAStatementAtTheTimeoutInWholeMillisecondsRoundedUp() {
        Properties bounded = PostgresConfig.parse("postgresql://u@h/db?timeout=0.0005").properties(true);
        assertEquals("-c statement_timeout=1", bounded.getProperty("options"));
        assertEquals("2", bounded.getProperty("socketTimeout"), "whole seconds, past the server's limit");
        bounded = PostgresConfig.parse("postgresql://u@h/db?timeout=2.5").properties(true);
        assertEquals("-c statement_timeout=2500", bounded.getProperty("options"));
        assertEquals("4", bounded.getProperty("socketTimeout"));
        assertEquals("3", bounded.getProperty("connectTimeout"), "a new connection waits the timeout too");
    }

    @Test
    void theUrlsOwnOptionsAreKept() {
        PostgresConfig config = PostgresConfig.parse("postgresql://u@h/db?timeout=1&options=-c%20TimeZone%3DUTC");
        assertEquals("-c TimeZone=UTC -c statement_timeout=1000", config.properties(true).getProperty("options"));
        assertEquals("-c TimeZone=UTC", config.properties(false).getProperty("options"));
    }

    @Test
    void serverTimeoutFalseLeavesTheServerAloneAndKeepsTheClientLimit() {
        PostgresConfig config = PostgresConfig.parse("postgresql://u@h/db?timeout=1&server_timeout=false");
        Properties bounded = config.properties(true);
        assertNull(bounded.getProperty("options"));
        assertNull(bounded.getProperty("server_timeout"), "an rdq option, not the driver's");
        assertEquals("2", bounded.getProperty("socketTimeout"));
    }

    @Test
    void migrateAndListenConnectionsAreUnbounded() {
        Properties unbounded = PostgresConfig.parse("postgresql://u@h/db?timeout=1").properties(false);
        assertNull(unbounded.getProperty("options"));
        assertNull(unbounded.getProperty("socketTimeout"));
    }
}

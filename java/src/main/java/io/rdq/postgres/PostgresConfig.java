package io.rdq.postgres;

import io.rdq.ConfigException;
import io.rdq.Limits;
import java.net.URI;
import java.net.URISyntaxException;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import java.util.regex.Pattern;

/**
 * How {@link PostgresStorage} connects, from a {@code postgresql://user:password@host:port/db}
 * URL whose query parameters set rdq's options ({@code schema}, {@code timeout},
 * {@code pool_max}, {@code connect_timeout}, {@code server_timeout}, {@code notify}); other
 * query parameters are passed to the JDBC driver as connection properties ({@code sslmode},
 * {@code options}, ...).
 *
 * @param timeout seconds one operation may wait on the server before it throws
 *     {@link io.rdq.StorageUnavailableException} ({@code migrate} and {@code waitDue}'s own wait
 *     are exempt)
 * @param connectTimeout seconds to wait for a new connection (default: {@code timeout})
 * @param serverTimeout whether the server stops a statement at {@code timeout} too
 *     ({@code statement_timeout}, sent when connecting); PgBouncer refuses that unless told to
 *     ignore it: {@code server_timeout=false} there
 */
public record PostgresConfig(
        String jdbcUrl,
        String user,
        String password,
        String schema,
        double timeout,
        int poolMax,
        double connectTimeout,
        boolean serverTimeout,
        boolean notifications,
        Map<String, String> driverProperties) {

    private static final Pattern IDENT = Pattern.compile("[A-Za-z_][A-Za-z0-9_]{0,50}");

    public PostgresConfig {
        driverProperties = Map.copyOf(driverProperties);
    }

    /** The NOTIFY channel announcing "a task of queue X may be due". */
    public String channel() {
        return schema + "_due";
    }

    /** {@code host:port} for messages (never the password). */
    public String endpoint() {
        String rest = jdbcUrl.substring("jdbc:postgresql://".length());
        int slash = rest.indexOf('/');
        return slash < 0 ? rest : rest.substring(0, slash);
    }

    /** Parse a {@code postgresql://} or {@code postgres://} URL; {@link ConfigException}
     * names a bad option. */
    public static PostgresConfig parse(String url) {
        URI uri;
        try {
            uri = new URI(url);
        } catch (URISyntaxException e) {
            throw new ConfigException("storage", "not a valid URL: " + e.getMessage());
        }
        String scheme = uri.getScheme();
        if (!"postgresql".equals(scheme) && !"postgres".equals(scheme)) {
            throw new ConfigException("storage", "not a postgresql:// URL");
        }
        String user = null;
        String password = null;
        if (uri.getRawUserInfo() != null) {
            String[] parts = uri.getRawUserInfo().split(":", 2);
            user = decode(parts[0]);
            password = parts.length > 1 ? decode(parts[1]) : null;
        }
        String host = uri.getHost() == null ? "localhost" : uri.getHost();
        int port = uri.getPort() < 0 ? 5432 : uri.getPort();
        String path = uri.getRawPath() == null || uri.getRawPath().length() <= 1 ? "" : uri.getRawPath().substring(1);
        String database = path.isEmpty() ? (user == null ? "postgres" : user) : decode(path);

        String schema = "rdq";
        double timeout = Limits.DEFAULT_OPERATION_TIMEOUT;
        int poolMax = 10;
        Double connectTimeout = null;
        boolean serverTimeout = true;
        boolean notify = true;
        Map<String, String> driver = new LinkedHashMap<>();
        if (uri.getRawQuery() != null && !uri.getRawQuery().isEmpty()) {
            for (String pair : uri.getRawQuery().split("&")) {
                if (pair.isEmpty()) {
                    continue;
                }
                String[] kv = pair.split("=", 2);
                String key = decode(kv[0]);
                String value = kv.length > 1 ? decode(kv[1]) : "";
                switch (key) {
                    case "schema" -> schema = value;
                    case "timeout" -> timeout = positive(key, value);
                    case "connect_timeout" -> connectTimeout = positive(key, value);
                    case "pool_max" -> poolMax = (int) Math.max(1, integer(key, value));
                    case "pool_min", "statement_cache_size", "command_timeout" -> {
                        // options of the Python store that mean nothing here
                    }
                    case "server_timeout" -> serverTimeout = bool(key, value);
                    case "notify" -> notify = bool(key, value);
                    default -> driver.put(key, value);
                }
            }
        }
        if (!IDENT.matcher(schema).matches()) {
            throw new ConfigException("schema", "must be a plain identifier (letters, digits, _; at most 51 characters)");
        }
        String jdbc = "jdbc:postgresql://" + (host.contains(":") ? "[" + host + "]" : host) + ":" + port + "/" + database;
        return new PostgresConfig(jdbc, user, password, schema, timeout, poolMax,
                connectTimeout == null ? timeout : connectTimeout, serverTimeout, notify, driver);
    }

    /** The JDBC connection properties; {@code bounded} adds the operation timeout: the
     * server's {@code statement_timeout} (whole milliseconds, rounded up, added to the URL's own
     * {@code options}) unless {@code server_timeout=false}, and the client's socket timeout. */
    Properties properties(boolean bounded) {
        Properties props = new Properties();
        props.putAll(driverProperties);
        if (user != null) {
            props.setProperty("user", user);
        }
        if (password != null) {
            props.setProperty("password", password);
        }
        props.putIfAbsent("ApplicationName", "rdq-java");
        props.setProperty("connectTimeout", Integer.toString((int) Math.ceil(connectTimeout)));
        props.setProperty("loginTimeout", Integer.toString((int) Math.ceil(connectTimeout)));
        props.setProperty("tcpKeepAlive", "true");
        if (bounded) {
            if (serverTimeout) {
                long ms = (long) Math.ceil(timeout * 1000);
                String own = driverProperties.getOrDefault("options", "").strip();
                props.setProperty("options", (own.isEmpty() ? "" : own + " ") + "-c statement_timeout=" + ms);
            }
            // the socket timeout catches a server that stopped answering altogether; it is in
            // whole seconds, so it is set a little past the statement timeout
            props.setProperty("socketTimeout", Long.toString((long) Math.ceil(timeout) + 1));
        }
        return props;
    }

    private static String decode(String text) {
        return URLDecoder.decode(text, StandardCharsets.UTF_8);
    }

    private static double positive(String key, String value) {
        try {
            double seconds = Double.parseDouble(value);
            if (seconds > 0 && Double.isFinite(seconds)) {
                return seconds;
            }
        } catch (NumberFormatException e) {
            // reported below
        }
        throw new ConfigException(key, "invalid value '" + value + "': must be a positive number of seconds");
    }

    private static long integer(String key, String value) {
        try {
            return Long.parseLong(value);
        } catch (NumberFormatException e) {
            throw new ConfigException(key, "invalid value '" + value + "'");
        }
    }

    private static boolean bool(String key, String value) {
        return switch (value.toLowerCase()) {
            case "1", "true", "yes", "on" -> true;
            case "0", "false", "no", "off" -> false;
            default -> throw new ConfigException(key, "invalid value '" + value + "'");
        };
    }
}

package io.rdq.postgres;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The statements of the store: the SQL files of rdq's Python plugin
 * ({@code packages/rdq-postgres/src/rdq_postgres/sql/}), which the build copies into the jar
 * beside this class, so both languages run the same statements. They are compiled here as the
 * plugin's loader ({@code rdq_postgres/_queries.py}) compiles them for asyncpg:
 *
 * <ul>
 *   <li>{@code sql/<name>.sql} is one statement; it names its parameters ({@code :queue}; a
 *       name may occur several times, {@code ::} is a cast, quoted text and identifiers are
 *       left alone) and becomes JDBC {@code ?} placeholders with the name of each, in order;
 *   <li>{@code sql/<name>.part} is a fragment, put in wherever a statement or a fragment says
 *       {@code {name}}; {@code {schema}} (quoted) and {@code {channel}} are the store's own; any
 *       other {@code {name}} is a slot the caller fills ({@link #get(String, Map)}) with fixed
 *       text chosen by the code (a column name, a status, a fragment's {@code {name}}), never a
 *       value;
 *   <li>{@code --} comments are dropped (a comment line with its line break).
 * </ul>
 */
final class Sql {
    /** A statement with JDBC {@code ?} placeholders and the parameter name of each, in order. */
    record Statement(String name, String text, List<String> params) {}

    private static final Pattern SLOT = Pattern.compile("\\{([a-z_][a-z0-9_]*)\\}");
    /** How deep fragments may name fragments (a guard against a fragment naming itself). */
    private static final int NESTING = 8;
    private static final Map<String, Optional<String>> FILES = new ConcurrentHashMap<>();

    private final String schema;
    private final String channel;
    private final Map<String, Statement> cache = new ConcurrentHashMap<>();

    Sql(String schema, String channel) {
        this.schema = schema;
        this.channel = channel;
    }

    /** {@code sql/<name>.sql}, compiled. */
    Statement get(String name) {
        return get(name, Map.of());
    }

    /** {@code sql/<name>.sql} with its slots filled in by {@code slots}, compiled (once per
     * store and set of slots). */
    Statement get(String name, Map<String, String> slots) {
        String key = name + new TreeMap<>(slots);
        return cache.computeIfAbsent(key, k -> parse(name, fill(statement(name), slots, 0)));
    }

    /** {@code sql/<name>.sql} with the store's names filled in but not compiled: several
     * statements without parameters ({@code migrate_prepare}). */
    String script(String name) {
        return render(statement(name));
    }

    /** A text with {@code {schema}} and {@code {channel}} filled in (a migration). */
    String render(String text) {
        return text.replace("{schema}", "\"" + schema + "\"").replace("{channel}", channel);
    }

    private static String statement(String name) {
        return file(name + ".sql").orElseThrow(
                () -> new IllegalStateException("missing statement sql/" + name + ".sql (is the jar complete?)"));
    }

    private String fill(String text, Map<String, String> slots, int depth) {
        Matcher m = SLOT.matcher(text);
        StringBuilder out = new StringBuilder(text.length());
        while (m.find()) {
            String name = m.group(1);
            String value;
            if (name.equals("schema")) {
                value = "\"" + schema + "\"";
            } else if (name.equals("channel")) {
                value = channel;
            } else {
                if (depth >= NESTING) {
                    throw new IllegalStateException("fragments nest deeper than " + NESTING + " at {" + name + "}");
                }
                String given = slots.containsKey(name) ? slots.get(name) : file(name + ".part").orElse(null);
                if (given == null) {
                    throw new IllegalStateException("no fragment sql/" + name + ".part and no text for {" + name + "}");
                }
                value = fill(given.strip(), slots, depth + 1);
                String indent = text.substring(text.lastIndexOf('\n', m.start() - 1) + 1, m.start());
                if (!indent.isEmpty() && indent.isBlank()) {
                    value = value.replace("\n", "\n" + indent);
                }
            }
            m.appendReplacement(out, Matcher.quoteReplacement(value));
        }
        m.appendTail(out);
        return out.toString();
    }

    /** {@code sql/<name>} without its comments; empty if the jar has no such file. */
    private static Optional<String> file(String name) {
        return FILES.computeIfAbsent(name, n -> {
            String path = "sql/" + n;
            if (Sql.class.getResource(path) == null) {
                return Optional.empty();
            }
            return Optional.of(uncommented(read(path)));
        });
    }

    static String read(String path) {
        try (InputStream in = Sql.class.getResourceAsStream(path)) {
            if (in == null) {
                throw new IllegalStateException("missing resource " + path + " (is the jar complete?)");
            }
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** The end of the quoted text (string or identifier) starting at {@code i}: the index past
     * its closing quote (a doubled quote is part of the text). */
    private static int quoted(String text, int i) {
        char quote = text.charAt(i);
        int n = text.length();
        int end = text.indexOf(quote, i + 1);
        while (end >= 0 && end + 1 < n && text.charAt(end + 1) == quote) {
            end = text.indexOf(quote, end + 2);
        }
        return end < 0 ? n : end + 1;
    }

    /** {@code text} without its {@code --} comments; a line that holds only a comment goes with
     * its line break. */
    static String uncommented(String text) {
        StringBuilder out = new StringBuilder(text.length());
        int n = text.length();
        int i = 0;
        while (i < n) {
            char c = text.charAt(i);
            if (c == '\'' || c == '"') {
                int end = quoted(text, i);
                out.append(text, i, end);
                i = end;
            } else if (c == '-' && i + 1 < n && text.charAt(i + 1) == '-') {
                int eol = text.indexOf('\n', i);
                eol = eol < 0 ? n : eol;
                int lineStart = out.lastIndexOf("\n") + 1;
                if (out.substring(lineStart).isBlank()) {
                    out.setLength(lineStart); // the whole line was the comment
                    i = Math.min(eol + 1, n);
                } else {
                    i = eol;
                }
            } else {
                out.append(c);
                i++;
            }
        }
        return out.toString();
    }

    /** {@code text} with its named parameters as {@code ?}, and their names in order; comments
     * are dropped. */
    static Statement parse(String name, String text) {
        String plain = uncommented(text);
        StringBuilder out = new StringBuilder(plain.length());
        List<String> params = new ArrayList<>();
        int i = 0;
        int n = plain.length();
        while (i < n) {
            char c = plain.charAt(i);
            if (c == '\'' || c == '"') {
                int end = quoted(plain, i);
                out.append(plain, i, end);
                i = end;
            } else if (c == ':' && i + 1 < n && plain.charAt(i + 1) == ':') { // a cast
                out.append("::");
                i += 2;
            } else if (c == ':' && i + 1 < n && isAsciiLetter(plain.charAt(i + 1))) {
                int end = i + 1;
                while (end < n && isNameChar(plain.charAt(end))) {
                    end++;
                }
                params.add(plain.substring(i + 1, end));
                out.append('?');
                i = end;
            } else {
                out.append(c);
                i++;
            }
        }
        return new Statement(name, out.toString().strip(), List.copyOf(params));
    }

    private static boolean isAsciiLetter(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    }

    private static boolean isNameChar(char c) {
        return isAsciiLetter(c) || (c >= '0' && c <= '9') || c == '_';
    }
}

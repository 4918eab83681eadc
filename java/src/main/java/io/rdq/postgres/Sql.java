package io.rdq.postgres;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The statements of the store, read from the {@code sql/*.sql} resources beside this class and
 * rendered for one schema. Statements name their parameters ({@code :queue}); a name may occur
 * several times. {@code ::} casts and quoted text are left alone.
 */
final class Sql {
    /** A statement with JDBC {@code ?} placeholders and the parameter name of each, in order. */
    record Statement(String name, String text, List<String> params) {}

    private final String schema;
    private final String channel;
    private final Map<String, Statement> cache = new ConcurrentHashMap<>();

    Sql(String schema, String channel) {
        this.schema = schema;
        this.channel = channel;
    }

    Statement get(String name) {
        return cache.computeIfAbsent(name, n -> parse(n, render(read("sql/" + n + ".sql"))));
    }

    /** A statement whose text has {@code {part}} placeholders, filled in with {@code parts}
     * (fixed text chosen by the code, such as a column name: never a value). */
    Statement get(String name, Map<String, String> parts) {
        String key = name + parts;
        return cache.computeIfAbsent(key, k -> {
            String text = render(read("sql/" + name + ".sql"));
            for (var part : parts.entrySet()) {
                text = text.replace("{" + part.getKey() + "}", part.getValue());
            }
            return parse(name, text);
        });
    }

    /** A resource's text with {@code {schema}} and {@code {channel}} filled in. */
    String render(String text) {
        return text.replace("{schema}", "\"" + schema + "\"").replace("{channel}", channel);
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

    static Statement parse(String name, String text) {
        StringBuilder out = new StringBuilder(text.length());
        List<String> params = new ArrayList<>();
        int i = 0;
        int n = text.length();
        while (i < n) {
            char c = text.charAt(i);
            if (c == '\'') { // a string literal: copy through to its closing quote
                int end = text.indexOf('\'', i + 1);
                while (end >= 0 && end + 1 < n && text.charAt(end + 1) == '\'') {
                    end = text.indexOf('\'', end + 2);
                }
                end = end < 0 ? n - 1 : end;
                out.append(text, i, end + 1);
                i = end + 1;
            } else if (c == '-' && i + 1 < n && text.charAt(i + 1) == '-') { // a comment line
                int end = text.indexOf('\n', i);
                end = end < 0 ? n : end;
                i = end;
            } else if (c == ':' && i + 1 < n && text.charAt(i + 1) == ':') { // a cast
                out.append("::");
                i += 2;
            } else if (c == ':' && i + 1 < n && Character.isLetter(text.charAt(i + 1))) {
                int end = i + 1;
                while (end < n && (Character.isLetterOrDigit(text.charAt(end)) || text.charAt(end) == '_')) {
                    end++;
                }
                params.add(text.substring(i + 1, end));
                out.append('?');
                i = end;
            } else {
                out.append(c);
                i++;
            }
        }
        return new Statement(name, out.toString().strip(), List.copyOf(params));
    }
}

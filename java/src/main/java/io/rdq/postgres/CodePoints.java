package io.rdq.postgres;

import java.util.Comparator;

/**
 * Strings ordered by Unicode code point, as Python compares them (and so as the contract
 * orders DLQ groups of the same size). {@link String#compareTo} compares UTF-16 code units,
 * which puts a character outside the Basic Multilingual Plane (a surrogate pair, units
 * U+D800–U+DFFF) before one in U+E000–U+FFFF; by code point it comes after.
 */
final class CodePoints {
    static final Comparator<String> ORDER = CodePoints::compare;

    private CodePoints() {}

    static int compare(String a, String b) {
        int i = 0;
        int j = 0;
        while (i < a.length() && j < b.length()) {
            int x = a.codePointAt(i);
            int y = b.codePointAt(j);
            if (x != y) {
                return Integer.compare(x, y);
            }
            i += Character.charCount(x);
            j += Character.charCount(y);
        }
        return Integer.compare(a.length() - i, b.length() - j);
    }
}

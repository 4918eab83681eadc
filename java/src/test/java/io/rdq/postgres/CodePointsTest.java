package io.rdq.postgres;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

class CodePointsTest {
    @Test
    void aCharacterOutsideTheBmpSortsAfterOneNearTheTopOfIt() {
        String emoji = "err\uD83D\uDE00"; // U+1F600
        String privateUse = "err\uE000"; // U+E000
        assertTrue("err\uD83D\uDE00".compareTo(privateUse) < 0, "UTF-16 order puts the pair first");
        assertTrue(CodePoints.compare(emoji, privateUse) > 0, "by code point it comes after");
    }

    @Test
    void prefixesAndEqualStringsOrderAsPythonDoes() {
        List<String> names = new ArrayList<>(List.of("b", "a\uE000", "a", "a\uD83D\uDE00", "ab", "A", ""));
        names.sort(CodePoints.ORDER);
        // sorted(["b", "a\ue000", "a", "a\U0001f600", "ab", "A", ""]) in Python
        assertEquals(List.of("", "A", "a", "ab", "a\uE000", "a\uD83D\uDE00", "b"), names);
        assertEquals(0, CodePoints.compare("x\uD83D\uDE00", "x\uD83D\uDE00"));
    }
}

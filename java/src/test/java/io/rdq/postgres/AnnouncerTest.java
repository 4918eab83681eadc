package io.rdq.postgres;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

class AnnouncerTest {
    @Test
    void anEnqueueCarriesItsOwnNotificationOnlyWhileNothingElseIsAnnounced() throws Exception {
        CountDownLatch gate = new CountDownLatch(1);
        LinkedBlockingQueue<Set<String>> sent = new LinkedBlockingQueue<>();
        try (Announcer announcer = new Announcer(queues -> {
            sent.add(Set.copyOf(queues));
            try {
                gate.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        })) {
            assertTrue(announcer.tryCarry(), "an idle announcer lets the enqueue carry it");
            assertFalse(announcer.tryCarry(), "two notifying transactions at once");
            announcer.announce("b");
            assertEquals(null, sent.poll(100, TimeUnit.MILLISECONDS), "sent while a carried one was in flight");
            announcer.carried();
            assertEquals(Set.of("b"), sent.poll(10, TimeUnit.SECONDS));
            assertFalse(announcer.tryCarry(), "a notification in flight: the enqueue leaves it to the announcer");
            gate.countDown();
        }
        assertEquals(List.of(), List.copyOf(sent));
    }
}

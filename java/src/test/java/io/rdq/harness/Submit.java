package io.rdq.harness;

import io.rdq.Envelope;
import io.rdq.RawJson;
import io.rdq.postgres.PostgresStorage;

/** A Java producer: {@code Submit URL QUEUE HANDLER_REF ID PAYLOAD_JSON} admits one task and
 * prints {@code true} (stored) or {@code false} (the id existed). */
public final class Submit {
    private Submit() {}

    public static void main(String[] args) {
        try (PostgresStorage storage = PostgresStorage.fromUrl(args[0])) {
            storage.connect();
            boolean stored = storage.enqueue(Envelope.builder(args[3], args[1], args[2])
                    .payload(RawJson.of(args[4])).headers(java.util.Map.of("producer", "java")).build());
            System.out.println(stored);
        }
    }
}

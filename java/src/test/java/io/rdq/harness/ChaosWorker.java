package io.rdq.harness;

import io.rdq.Attempt;
import io.rdq.Claimed;
import io.rdq.StaleClaimException;
import io.rdq.StorageUnavailableException;
import io.rdq.postgres.PostgresStorage;
import java.io.FileOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;

/**
 * The kill -9 chaos test's worker process in Java, a line-for-line counterpart of
 * {@code rdq_compliance._chaos_worker}: {@code ChaosWorker URL QUEUE LOGFILE --lease SECONDS}
 * claims one task at a time with a short lease, logs the claim (fsync'd) before "handling" it
 * for a few tens of milliseconds, completes it and logs {@code done} (or {@code stale}). Times
 * in the log are the storage's, as {@code claimDue} returned them.
 */
public final class ChaosWorker {
    private ChaosWorker() {}

    public static void main(String[] args) throws Exception {
        String url = args[0];
        String queue = args[1];
        Duration lease = Duration.ofMillis((long) (Double.parseDouble(args[4]) * 1000));
        String pid = Long.toString(ProcessHandle.current().pid());
        try (FileOutputStream log = new FileOutputStream(args[2], true); PostgresStorage storage = PostgresStorage.fromUrl(url)) {
            storage.connect();
            write(log, "start " + pid);
            while (true) {
                List<Claimed> claimed;
                try {
                    claimed = storage.claimDue(queue, 1, lease);
                } catch (StorageUnavailableException e) {
                    Thread.sleep(100);
                    continue;
                }
                if (claimed.isEmpty()) {
                    storage.waitDue(queue, Duration.ofMillis(200));
                    continue;
                }
                Claimed claim = claimed.get(0);
                Instant expires = claim.task().leaseExpiresAt();
                Instant started = expires.minus(lease);
                write(log, "claim " + claim.task().id() + " " + claim.token() + " " + iso(started) + " " + iso(expires) + " " + pid);
                Thread.sleep((long) (ThreadLocalRandom.current().nextDouble(0.3, 1.7) * 60));
                Attempt attempt = Attempt.succeeded(claim.task().attemptCount() + 1, started, Instant.now(), "chaos-" + pid);
                try {
                    storage.complete(claim.task().id(), claim.token(), attempt);
                } catch (StaleClaimException e) {
                    write(log, "stale " + claim.task().id() + " " + claim.token() + " " + pid);
                    continue;
                }
                write(log, "done " + claim.task().id() + " " + claim.token() + " " + pid);
            }
        }
    }

    /** As Python's datetime.isoformat() reads it back. */
    private static String iso(Instant at) {
        return io.rdq.json.Times.format(at).replace("Z", "+00:00");
    }

    private static void write(FileOutputStream log, String line) throws IOException {
        log.write((line + "\n").getBytes(StandardCharsets.UTF_8));
        log.flush();
        log.getFD().sync();
    }
}

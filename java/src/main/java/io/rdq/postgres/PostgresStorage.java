package io.rdq.postgres;

import io.rdq.Admitted;
import io.rdq.Attempt;
import io.rdq.AuditEntry;
import io.rdq.AuditFilter;
import io.rdq.Capabilities;
import io.rdq.Claimed;
import io.rdq.Completion;
import io.rdq.Control;
import io.rdq.ControlConflictException;
import io.rdq.Counts;
import io.rdq.Cursors;
import io.rdq.Dedup;
import io.rdq.DedupConflictException;
import io.rdq.DlqFilter;
import io.rdq.DlqGroup;
import io.rdq.Envelope;
import io.rdq.Limits;
import io.rdq.NotConnectedException;
import io.rdq.NotFoundException;
import io.rdq.Page;
import io.rdq.PageRequest;
import io.rdq.Selector;
import io.rdq.StaleClaimException;
import io.rdq.Stats;
import io.rdq.Storage;
import io.rdq.StorageException;
import io.rdq.StorageUnavailableException;
import io.rdq.TaskFilter;
import io.rdq.ValidationException;
import io.rdq.WorkerInfo;
import io.rdq.json.EnvelopeJson;
import io.rdq.json.Times;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * The storage contract on PostgreSQL over JDBC, on the same tables as rdq's Python plugin
 * (docs/postgres-schema.md). Every operation is one statement in autocommit: due-ness, leases
 * and timestamps come from the database clock, claims use {@code FOR UPDATE SKIP LOCKED}, and
 * every change after a claim is fenced on the claim token in its {@code WHERE} clause. A queue
 * that a control restricts is claimed by {@code claim_controlled.sql}, which honours the
 * controls in its one statement ({@code claim.sql} refuses such a queue with SQLSTATE RQ423;
 * the store remembers which queues it refused). The SQL
 * is the Python plugin's, in the {@code sql/} resources beside this class (see {@link Sql}).
 *
 * <pre>{@code
 * try (Storage storage = PostgresStorage.fromUrl("postgresql://app:secret@db:5432/app")) {
 *     storage.connect();
 *     storage.enqueue(Envelope.of("order-42", "emails", "send_receipt", RawJson.encode(order)));
 * }
 * }</pre>
 */
public final class PostgresStorage implements Storage {
    private final PostgresConfig config;
    private final Sql sql;
    private final DueListener listener;
    private final Object lifecycle = new Object();
    private volatile ConnectionPool pool;
    private volatile Announcer announcer;
    private volatile boolean closed;
    /** Queues claim.sql refused (a control restricts them): claimed with claim_controlled.sql
     * until it says that none does any more. */
    private final Set<String> controlled = java.util.concurrent.ConcurrentHashMap.newKeySet();
    /** When this store last raised each queue's lease floor (System.nanoTime()). */
    private final java.util.concurrent.ConcurrentHashMap<String, Long> leaseFloorRaised =
            new java.util.concurrent.ConcurrentHashMap<>();
    /** Between a store's raises of the lease floor of a queue it claims under a control (the
     * schema raises it at most once a second, whoever asks). */
    static final Duration LEASE_FLOOR_RAISE_EVERY = Duration.ofSeconds(1);

    public PostgresStorage(PostgresConfig config) {
        this.config = config;
        this.sql = new Sql(config.schema(), config.channel());
        this.listener = new DueListener(config.jdbcUrl(), config.properties(false), config.channel());
    }

    /** A (not yet connected) store for a {@code postgresql://} URL; see {@link PostgresConfig}. */
    public static PostgresStorage fromUrl(String url) {
        return new PostgresStorage(PostgresConfig.parse(url));
    }

    public PostgresConfig config() {
        return config;
    }

    @Override
    public String toString() {
        return "PostgresStorage(" + config.endpoint() + ", schema=" + config.schema() + ")";
    }

    // --- lifecycle ------------------------------------------------------------------------

    @Override
    public void connect() {
        synchronized (lifecycle) {
            if (pool != null) {
                return;
            }
            ConnectionPool opened = new ConnectionPool(config.jdbcUrl(), config.properties(true), config.poolMax(),
                    config.timeout(), config.endpoint());
            try {
                Connection conn = opened.acquire();
                try {
                    Migrations.check(Migrations.current(conn, sql), config.schema());
                } finally {
                    opened.release(conn, false);
                }
            } catch (SQLException e) {
                opened.close();
                throw Errors.translate(e, config.endpoint());
            } catch (RuntimeException e) {
                opened.close();
                throw e;
            }
            listener.reopen();
            announcer = new Announcer(this::sendNotify);
            pool = opened;
            closed = false;
        }
    }

    @Override
    public void close() {
        synchronized (lifecycle) {
            ConnectionPool open = pool;
            if (open == null) {
                return;
            }
            pool = null;
            closed = true;
            announcer.close();
            listener.close();
            open.close();
        }
    }

    private ConnectionPool ready() {
        ConnectionPool open = pool;
        if (open == null) {
            throw new NotConnectedException("PostgresStorage", closed);
        }
        return open;
    }

    /** Work done with one pooled connection. */
    private interface Work<T> {
        T run(Connection conn) throws SQLException;
    }

    private <T> T with(Work<T> work) {
        ConnectionPool open = ready();
        Connection conn;
        try {
            conn = open.acquire();
        } catch (SQLException e) {
            throw Errors.translate(e, config.endpoint());
        }
        boolean broken = false;
        try {
            return work.run(conn);
        } catch (SQLException e) {
            broken = Errors.broken(e);
            if (Errors.unavailable(e) && broken) {
                open.expire();
            }
            throw Errors.translate(e, config.endpoint());
        } finally {
            open.release(conn, broken);
        }
    }

    /** Rows of a query, each mapped by {@code row}. */
    private interface RowMapper<T> {
        T map(ResultSet rs) throws SQLException;
    }

    private <T> List<T> query(String name, Params params, RowMapper<T> row) {
        return with(conn -> {
            try (PreparedStatement ps = params.prepare(conn, sql.get(name)); ResultSet rs = ps.executeQuery()) {
                List<T> out = new ArrayList<>();
                while (rs.next()) {
                    out.add(row.map(rs));
                }
                return out;
            }
        });
    }

    private <T> T queryOne(String name, Params params, RowMapper<T> row) {
        List<T> rows = query(name, params, row);
        if (rows.size() != 1) {
            throw new StorageException(name + ".sql returned " + rows.size() + " rows, expected one");
        }
        return rows.get(0);
    }

    private int update(String name, Params params) {
        return with(conn -> {
            try (PreparedStatement ps = params.prepare(conn, sql.get(name))) {
                return ps.executeUpdate();
            }
        });
    }

    @Override
    public List<String> migrate() {
        ready();
        // a connection of its own: migrations are exempt from the operation timeout
        try (Connection conn = java.sql.DriverManager.getConnection(config.jdbcUrl(), config.properties(false))) {
            return Migrations.apply(conn, sql, config.schema());
        } catch (SQLException e) {
            throw Errors.translate(e, config.endpoint());
        }
    }

    @Override
    public Capabilities capabilities() {
        return new Capabilities(Capabilities.CONTRACT_VERSION,
                config.notifications(), // notify
                true, // filter pushdown
                true, // batch enqueue
                true, // batch complete
                true, // group pushdown
                true, // priorities
                true, // claim holder
                true, // cancel
                true, // task listing
                true, // queue listing
                true, // import tasks
                true, // audit
                true, // control
                true, // worker registry
                true, // counters
                true, // fair shares
                true, // priority aging
                true, // retention
                true, // dedup
                true, // payload refs
                true); // discard succeeded
    }

    private void announce(String queue) {
        Announcer current = announcer;
        if (config.notifications() && current != null && queue != null) {
            current.announce(queue);
        }
    }

    private void sendNotify(Set<String> queues) {
        if (pool == null) {
            return;
        }
        query("notify", Params.of().set("queues", queues.toArray(String[]::new)), rs -> null);
    }

    // --- admission ------------------------------------------------------------------------

    /** Text columns cannot hold NUL; the json columns keep the exact value. */
    private static String text(String value) {
        return value == null ? null : value.replace('\u0000', '\ufffd');
    }

    private static Map<String, io.rdq.RawJson> unknownFields(Envelope task) {
        Map<String, io.rdq.RawJson> extra = new LinkedHashMap<>(task.extra());
        extra.keySet().removeAll(EnvelopeJson.KNOWN);
        return extra;
    }

    /** The parameters of enqueue.sql and admit.sql for {@code task} admitted after {@code delay}. */
    private static Params admissionParams(Envelope task, Duration delay) {
        return Params.of()
                .set("id", task.id())
                .set("queue", task.queue())
                .set("handler_ref", task.handlerRef())
                .set("payload", task.payload().text())
                .set("headers", EnvelopeJson.encodeHeaders(task.headers()))
                .set("attempt_count", task.attemptCount())
                .set("redrive_count", task.redriveCount())
                .set("attempts", EnvelopeJson.encodeAttempts(task.attempts()))
                .set("error_type", text(task.lastErrorType()))
                .set("next_attempt_at", task.nextAttemptAt())
                .set("delay_us", delay == null ? 0L : Times.micros(delay))
                .set("retry", task.retry() == null ? null : EnvelopeJson.encodeRetry(task.retry()))
                .set("format_version", task.formatVersion())
                .set("extra", EnvelopeJson.encodeExtra(unknownFields(task)))
                .set("priority", task.priority())
                .set("keys", joinedKeys(task.keys()));
    }

    @Override
    public Admitted admit(Envelope task, Dedup dedup, Duration delay) {
        ready();
        Limits.checkTask(task);
        Limits.checkDedup(dedup);
        Limits.checkDelay(delay, "delay");
        Params params = admissionParams(task, delay)
                .set("dedup_key", dedup.key())
                .set("dedup_mode", dedup.mode())
                .set("window_us", dedup.window() == null ? null : Math.round(dedup.window() * 1_000_000))
                .set("max_age_us", dedup.maxAge() == null ? null : Math.round(dedup.maxAge() * 1_000_000));
        Admitted row = queryOne("admit", params,
                rs -> new Admitted(rs.getString("outcome"), rs.getString("task_id"), rs.getString("queue")));
        switch (row.outcome()) {
            case "id_conflict" -> throw new io.rdq.IdConflictException(task.id(), row.queue());
            case "dedup_conflict" -> throw new DedupConflictException(dedup.key(), row.queue(), row.taskId());
            case "added" -> announce(row.queue());
            case "replaced" -> {
                if (dedup.mode().equals("debounce")) {
                    announce(row.queue());
                }
            }
            default -> { }
        }
        return row;
    }

    @Override
    public boolean enqueue(Envelope task, Duration delay) {
        ready();
        Limits.checkTask(task);
        Limits.checkDelay(delay, "delay");
        Params params = admissionParams(task, delay);
        Announcer current = config.notifications() ? announcer : null;
        boolean carried = current != null && current.tryCarry();
        List<String> stored;
        try {
            stored = query("enqueue", params.set("notify", carried), rs -> rs.getString(1));
        } finally {
            if (carried) {
                current.carried();
            }
        }
        if (!stored.isEmpty()) {
            if (!carried) {
                announce(task.queue());
            }
            return true;
        }
        List<String> holder = query("existing_queue", Params.of().set("id", task.id()), rs -> rs.getString(1));
        if (!holder.isEmpty() && !holder.get(0).equals(task.queue())) {
            throw new io.rdq.IdConflictException(task.id(), holder.get(0));
        }
        return false;
    }

    @Override
    public List<Boolean> enqueueBatch(List<Envelope> tasks, Duration delay) {
        ready();
        if (tasks == null) {
            throw new ValidationException("tasks", "must be a list of envelopes");
        }
        Limits.checkDelay(delay, "delay");
        tasks.forEach(Limits::checkTask);
        Map<String, Envelope> unique = new LinkedHashMap<>();
        for (Envelope task : tasks) {
            Envelope first = unique.putIfAbsent(task.id(), task);
            if (first != null && !first.queue().equals(task.queue())) {
                throw new io.rdq.IdConflictException(task.id(), first.queue());
            }
        }
        if (unique.isEmpty()) {
            return List.of();
        }
        List<Envelope> items = new ArrayList<>(unique.values());
        int n = items.size();
        String[] ids = new String[n];
        String[] queues = new String[n];
        String[] refs = new String[n];
        String[] payloads = new String[n];
        String[] headers = new String[n];
        Integer[] attemptCounts = new Integer[n];
        Integer[] redriveCounts = new Integer[n];
        String[] attempts = new String[n];
        String[] errorTypes = new String[n];
        String[] nextAts = new String[n];
        String[] retries = new String[n];
        Integer[] formats = new Integer[n];
        String[] extras = new String[n];
        Integer[] priorities = new Integer[n];
        String[] keys = new String[n];
        for (int i = 0; i < n; i++) {
            Envelope t = items.get(i);
            ids[i] = t.id();
            queues[i] = t.queue();
            refs[i] = t.handlerRef();
            payloads[i] = t.payload().text();
            headers[i] = EnvelopeJson.encodeHeaders(t.headers());
            attemptCounts[i] = t.attemptCount();
            redriveCounts[i] = t.redriveCount();
            attempts[i] = EnvelopeJson.encodeAttempts(t.attempts());
            errorTypes[i] = text(t.lastErrorType());
            nextAts[i] = t.nextAttemptAt() == null ? null : Times.format(t.nextAttemptAt());
            retries[i] = t.retry() == null ? null : EnvelopeJson.encodeRetry(t.retry());
            formats[i] = t.formatVersion();
            extras[i] = EnvelopeJson.encodeExtra(unknownFields(t));
            priorities[i] = t.priority();
            keys[i] = joinedKeys(t.keys());
        }
        Params params = Params.of().set("ids", ids).set("queues", queues).set("handler_refs", refs)
                .set("payloads", payloads).set("headers", headers).set("attempt_counts", attemptCounts)
                .set("redrive_counts", redriveCounts).set("attempts", attempts).set("error_types", errorTypes)
                .set("next_attempt_ats", nextAts).set("retries", retries).set("format_versions", formats)
                .set("extras", extras).set("priorities", priorities).set("keys", keys)
                .set("delay_us", delay == null ? 0L : Times.micros(delay));
        Set<String> present = new HashSet<>(queryOne("enqueue_batch", params, rs -> strings(rs, "present")));
        Set<String> stored = new HashSet<>();
        for (Envelope t : items) {
            if (!present.contains(t.id())) {
                stored.add(t.id());
                announce(t.queue());
            }
        }
        List<Boolean> result = new ArrayList<>(tasks.size());
        for (Envelope t : tasks) {
            result.add(stored.remove(t.id()));
        }
        return result;
    }

    /** A task's keys as the admission statements take them: joined by U+001F, a character no
     * key holds ({@code ""} for none). */
    static String joinedKeys(List<String> keys) {
        return String.join("\u001f", keys);
    }

    private static List<String> strings(ResultSet rs, String column) throws SQLException {
        java.sql.Array array = rs.getArray(column);
        if (array == null) {
            return List.of();
        }
        return Arrays.asList((String[]) array.getArray());
    }

    // --- claiming -------------------------------------------------------------------------

    @Override
    public List<Claimed> claimDue(String queue, int limit, Duration lease, String workerId) {
        ready();
        Limits.checkQueue(queue);
        Limits.checkWorkerId(workerId, "worker_id");
        Limits.checkLimit(limit, "limit");
        Limits.checkLease(lease, "lease");
        record Row(Claimed claimed, long rank) {}
        Params params = Params.of().set("queue", queue).set("limit", limit)
                .set("lease_us", Times.micros(lease)).set("worker_id", workerId);
        // both statements say where each claim stands in the queue's claim order (RETURNING
        // has no order of its own)
        RowMapper<Row> ranked = rs -> new Row(new Claimed(Rows.envelope(rs), rs.getString("token")),
                rs.getLong("claimed_rank"));
        List<Row> rows = null;
        if (!controlled.contains(queue)) {
            rows = with(conn -> {
                try (PreparedStatement ps = params.prepare(conn, sql.get("claim")); ResultSet rs = ps.executeQuery()) {
                    List<Row> out = new ArrayList<>();
                    while (rs.next()) {
                        out.add(ranked.map(rs));
                    }
                    return out;
                } catch (SQLException e) {
                    if (Errors.CONTROLLED.equals(e.getSQLState())) {
                        return null; // a control restricts the queue
                    }
                    throw e;
                }
            });
            if (rows == null) {
                controlled.add(queue);
            }
        }
        if (rows == null) {
            raiseLeaseFloor(queue);
            boolean[] still = {true};
            rows = with(conn -> {
                try (PreparedStatement ps = params.prepare(conn, sql.get("claim_controlled")); ResultSet rs = ps.executeQuery()) {
                    List<Row> out = new ArrayList<>();
                    while (rs.next()) {
                        still[0] = rs.getBoolean("controlled");
                        if (rs.getString("id") != null) {
                            out.add(ranked.map(rs));
                        }
                    }
                    return out;
                }
            });
            if (!still[0]) {
                controlled.remove(queue);
            }
        }
        // in the order the statement took them: the queue's claim order (by priority and due
        // time, or fair and aged)
        List<Row> inOrder = new ArrayList<>(rows);
        inOrder.sort(Comparator.comparingLong(Row::rank));
        return inOrder.stream().map(Row::claimed).toList();
    }

    /**
     * Raise the lease floor of {@code queue} (raise_lease_floor.sql, schema version 17: where
     * a count of its live leases starts) unless this store did within the last second: in a
     * statement of its own, since the queue's lease writers wait for its commit.
     */
    private void raiseLeaseFloor(String queue) {
        long now = System.nanoTime();
        Long last = leaseFloorRaised.get(queue);
        if (last != null && now - last < LEASE_FLOOR_RAISE_EVERY.toNanos()) {
            return;
        }
        leaseFloorRaised.put(queue, now);
        query("raise_lease_floor", Params.of().set("queue", queue), rs -> Boolean.TRUE);
    }

    @Override
    public Instant extendLease(String taskId, String token, Duration lease) {
        ready();
        Limits.checkTaskId(taskId);
        Limits.checkToken(token, "token");
        Limits.checkLease(lease, "lease");
        record Row(Instant expires, boolean found) {}
        Row row = queryOne("extend_lease", Params.of().set("id", taskId).set("token", token)
                .set("lease_us", Times.micros(lease)), rs -> new Row(Rows.instant(rs, "lease_expires_at"), rs.getBoolean("found")));
        if (row.expires() == null) {
            throw row.found() ? new StaleClaimException(taskId) : new NotFoundException(taskId);
        }
        return row.expires();
    }

    // --- resolution -----------------------------------------------------------------------

    private void resolve(String statement, String taskId, String token, Attempt attempt, Instant nextAt) {
        ready();
        Limits.checkTaskId(taskId);
        Limits.checkToken(token, "token");
        Limits.checkAttempt(attempt, "attempt");
        Params params = Params.of().set("id", taskId).set("token", token)
                .set("attempt", EnvelopeJson.encodeAttempt(attempt)).set("error_type", text(attempt.errorType()));
        if (statement.equals("reschedule")) {
            params.set("next_at", Limits.checkInstant(nextAt, "next_at"));
        }
        boolean rescheduled = statement.equals("reschedule");
        record Row(boolean done, boolean found, String queue) {}
        Row row = queryOne(statement, params, rs -> new Row(rs.getBoolean("done"), rs.getBoolean("found"),
                rescheduled ? rs.getString("queue") : null));
        if (!row.done()) {
            throw row.found() ? new StaleClaimException(taskId) : new NotFoundException(taskId);
        }
        if (rescheduled) {
            announce(row.queue());
        }
    }

    @Override
    public void reschedule(String taskId, String token, Attempt attempt, Instant nextAt) {
        resolve("reschedule", taskId, token, attempt, nextAt);
    }

    @Override
    public void complete(String taskId, String token, Attempt attempt) {
        resolve("complete", taskId, token, attempt, null);
    }

    @Override
    public void complete(String taskId, String token, Attempt attempt, boolean discard) {
        if (!discard) {
            complete(taskId, token, attempt);
            return;
        }
        ready();
        Limits.checkTaskId(taskId);
        Limits.checkToken(token, "token");
        Limits.checkAttempt(attempt, "attempt");
        record Row(boolean done, boolean found) {}
        Row row = queryOne("discard_completed", Params.of().set("id", taskId).set("token", token),
                rs -> new Row(rs.getBoolean("done"), rs.getBoolean("found")));
        if (!row.done()) {
            throw row.found() ? new StaleClaimException(taskId) : new NotFoundException(taskId);
        }
    }

    @Override
    public void deadLetter(String taskId, String token, Attempt attempt) {
        resolve("dead_letter", taskId, token, attempt, null);
    }

    @Override
    public List<StorageException> completeMany(List<Completion> completions) {
        ready();
        if (completions == null) {
            throw new ValidationException("completions", "must be a list of completions");
        }
        for (Completion item : completions) {
            if (item == null) {
                throw new ValidationException("completions", "must be completion items");
            }
            Limits.checkTaskId(item.taskId());
            Limits.checkToken(item.token(), "token");
            Limits.checkAttempt(item.attempt(), "attempt");
        }
        if (completions.isEmpty()) {
            return List.of();
        }
        Map<String, Completion> first = new LinkedHashMap<>();
        for (Completion item : completions) {
            first.putIfAbsent(item.taskId(), item);
        }
        List<Completion> items = new ArrayList<>(first.values());
        String[] ids = items.stream().map(Completion::taskId).toArray(String[]::new);
        String[] tokens = items.stream().map(Completion::token).toArray(String[]::new);
        String[] attempts = items.stream().map(c -> EnvelopeJson.encodeAttempt(c.attempt())).toArray(String[]::new);
        String[] errorTypes = items.stream().map(c -> text(c.attempt().errorType())).toArray(String[]::new);
        Params params = Params.of().set("ids", ids).set("tokens", tokens)
                .set("attempts", attempts).set("error_types", errorTypes);
        // complete_many_discarding.sql when some item deletes its task (keep_succeeded = false)
        boolean discarding = items.stream().anyMatch(Completion::discard);
        if (discarding) {
            params.set("discards", items.stream().map(Completion::discard).toArray(Boolean[]::new));
        }
        record Row(List<String> done, List<String> found) {}
        Row row = queryOne(discarding ? "complete_many_discarding" : "complete_many", params,
                rs -> new Row(strings(rs, "done"), strings(rs, "found")));
        Set<String> done = new HashSet<>(row.done());
        Set<String> found = new HashSet<>(row.found()); // looked up only when some item was not done
        found.addAll(done);
        List<StorageException> results = new ArrayList<>(completions.size());
        for (Completion item : completions) {
            if (done.contains(item.taskId()) && first.get(item.taskId()) == item) {
                results.add(null);
            } else if (found.contains(item.taskId())) {
                results.add(new StaleClaimException(item.taskId()));
            } else {
                results.add(new NotFoundException(item.taskId()));
            }
        }
        return Collections.unmodifiableList(results);
    }

    // --- DLQ ------------------------------------------------------------------------------

    private static Params filterParams(DlqFilter filter) {
        DlqFilter f = filter == null ? DlqFilter.ALL : filter;
        return Params.of().set("error_type", text(f.errorType())).set("handler_ref", f.handlerRef())
                .set("after", f.deadLetteredAfter()).set("before", f.deadLetteredBefore());
    }

    private static String dlqScope(String queue, DlqFilter filter) {
        DlqFilter f = filter == null ? DlqFilter.ALL : filter;
        return Cursors.scope("dlq", queue, f.errorType(), f.handlerRef(), f.deadLetteredAfter(), f.deadLetteredBefore());
    }

    @Override
    public Page<Envelope> dlqList(String queue, DlqFilter filter, PageRequest page) {
        ready();
        Limits.checkQueue(queue);
        Limits.checkPage(page);
        return taskPage(io.rdq.Status.DEAD, filterParams(filter).set("queue", queue), page, dlqScope(queue, filter));
    }

    /** One page of list_tasks.sql: the tasks in {@code status} by (that status's time, id) of
     * the queue and filter {@code params} name (queue, error_type, handler_ref, after, before). */
    private Page<Envelope> taskPage(io.rdq.Status status, Params params, PageRequest page, String scope) {
        // PENDING and IN_FLIGHT are listed by due_at (their next_attempt_at / lease_expires_at),
        // the column task_live_idx orders them by
        String at = switch (status) {
            case PENDING, IN_FLIGHT -> "due_at";
            default -> Limits.statusTimeField(status);
        };
        params.set("with_attempts", page.includeAttempts()).set("limit", page.limit() + 1);
        String keyset = "";
        if (page.cursor() != null) {
            Cursors.Position after = Cursors.decode(page.cursor(), scope);
            params.set("cursor_at", after.at()).set("cursor_id", after.id());
            keyset = "{task_keyset}";
        }
        Sql.Statement statement = sql.get("list_tasks", Map.of("status", status.name(), "at", at, "keyset", keyset));
        record Row(Envelope task, Instant at) {}
        List<Row> rows = with(conn -> {
            try (PreparedStatement ps = params.prepare(conn, statement); ResultSet rs = ps.executeQuery()) {
                List<Row> out = new ArrayList<>();
                while (rs.next()) {
                    out.add(new Row(Rows.envelope(rs), Rows.instant(rs, "listed_at")));
                }
                return out;
            }
        });
        List<Envelope> tasks = rows.stream().limit(page.limit()).map(Row::task).toList();
        if (rows.size() <= page.limit()) {
            return new Page<>(tasks, null);
        }
        Row last = rows.get(page.limit() - 1);
        return new Page<>(tasks, Cursors.encode(scope, last.at(), last.task().id()));
    }

    @Override
    public Envelope get(String taskId) {
        ready();
        Limits.checkTaskId(taskId);
        List<Envelope> rows = query("get", Params.of().set("id", taskId), Rows::envelope);
        if (rows.isEmpty()) {
            throw new NotFoundException(taskId);
        }
        return rows.get(0);
    }

    @Override
    public int redrive(String queue, Selector selector) {
        ready();
        Limits.checkQueue(queue);
        Limits.checkSelector(selector);
        long count;
        if (selector.ids() != null) {
            count = queryOne("redrive_ids", Params.of().set("queue", queue).set("ids", selector.ids().toArray(String[]::new)),
                    rs -> rs.getLong("n"));
        } else {
            count = queryOne("redrive_filter", filterParams(selector.filter()).set("queue", queue), rs -> rs.getLong("n"));
        }
        if (count > 0) {
            announce(queue);
        }
        return (int) count;
    }

    @Override
    public int purge(String queue, Selector selector) {
        ready();
        Limits.checkQueue(queue);
        Limits.checkSelector(selector);
        if (selector.ids() != null) {
            return update("purge_ids", Params.of().set("queue", queue).set("ids", selector.ids().toArray(String[]::new)));
        }
        return update("purge_filter", filterParams(selector.filter()).set("queue", queue));
    }

    @Override
    public List<DlqGroup> dlqGroups(String queue) {
        ready();
        Limits.checkQueue(queue);
        List<DlqGroup> groups = new ArrayList<>(query("dlq_groups", Params.of().set("queue", queue), rs -> new DlqGroup(
                rs.getString("handler_ref"), rs.getString("error_type"), rs.getLong("n"),
                Rows.instant(rs, "first_at"), Rows.instant(rs, "last_at"))));
        groups.sort(Comparator.comparingLong((DlqGroup g) -> -g.count())
                .thenComparing(DlqGroup::handlerRef, CodePoints.ORDER)
                .thenComparing(g -> g.errorType() == null)
                .thenComparing(g -> g.errorType() == null ? "" : g.errorType(), CodePoints.ORDER));
        return groups;
    }

    @Override
    public Page<Envelope> listTasks(String queue, TaskFilter filter, PageRequest page) {
        ready();
        Limits.checkQueue(queue);
        Limits.checkTaskFilter(filter);
        Limits.checkPage(page);
        String scope = Cursors.scope("tasks", queue, filter.status(), filter.errorType(), filter.handlerRef(),
                filter.after(), filter.before());
        Params params = Params.of().set("queue", queue).set("error_type", text(filter.errorType()))
                .set("handler_ref", filter.handlerRef()).set("after", filter.after()).set("before", filter.before());
        return taskPage(filter.status(), params, page, scope);
    }

    @Override
    public int cancel(String queue, List<String> taskIds) {
        ready();
        Limits.checkQueue(queue);
        Limits.checkCancelIds(taskIds);
        return update("cancel", Params.of().set("queue", queue).set("ids", taskIds.toArray(String[]::new)));
    }

    @Override
    public List<Stats> listQueues() {
        ready();
        List<String> names = queryOne("queue_names", Params.of(), rs -> strings(rs, "queues"));
        if (names.isEmpty()) {
            return List.of();
        }
        List<Stats> queues = new ArrayList<>(stats(names));
        queues.sort(Comparator.comparing(Stats::queue, CodePoints.ORDER));
        // a queue emptied between the two statements no longer holds a task
        queues.removeIf(q -> q.pending() + q.inFlight() + q.dlqDepth() + q.succeeded() + q.cancelled() == 0);
        return queues;
    }

    private List<Stats> stats(List<String> queues) {
        long stop = Limits.EXACT_COUNT_THRESHOLD + 1;
        return query("stats", Params.of().set("queues", queues.toArray(String[]::new)).set("stop", stop), rs -> {
            Instant asOf = Rows.instant(rs, "as_of");
            Instant oldest = Rows.instant(rs, "oldest_due");
            Double age = oldest == null ? null : Duration.between(oldest, asOf).toNanos() / 1e9;
            List<String> estimated = new ArrayList<>();
            long[] counts = new long[5];
            String[][] names = {{"pending", "pending"}, {"in_flight", "in_flight"}, {"dead", "dlq_depth"},
                {"succeeded", "succeeded"}, {"cancelled", "cancelled"}};
            for (int i = 0; i < names.length; i++) {
                counts[i] = rs.getLong(names[i][0]);
                long estimate = rs.getLong(names[i][0] + "_estimate");
                if (!rs.wasNull()) {
                    // the count stopped at the threshold: the planner's estimate, never below it
                    counts[i] = Math.max(estimate, stop);
                    estimated.add(names[i][1]);
                }
            }
            return new Stats(rs.getString("queue"), counts[0], counts[1], counts[2], counts[3], age, asOf, counts[4], estimated);
        });
    }

    @Override
    public List<Boolean> importTasks(List<Envelope> tasks) {
        ready();
        Limits.checkImportedTasks(tasks);
        Map<String, Envelope> unique = new LinkedHashMap<>();
        for (Envelope task : tasks) {
            Envelope first = unique.putIfAbsent(task.id(), task);
            if (first != null && !first.queue().equals(task.queue())) {
                throw new io.rdq.IdConflictException(task.id(), first.queue());
            }
        }
        if (unique.isEmpty()) {
            return List.of();
        }
        List<Envelope> items = new ArrayList<>(unique.values());
        Params params = Params.of()
                .set("ids", column(items, Envelope::id))
                .set("queues", column(items, Envelope::queue))
                .set("handler_refs", column(items, Envelope::handlerRef))
                .set("payloads", column(items, t -> t.payload().text()))
                .set("headers", column(items, t -> EnvelopeJson.encodeHeaders(t.headers())))
                .set("statuses", column(items, t -> t.status().name()))
                .set("attempt_counts", items.stream().map(Envelope::attemptCount).toArray(Integer[]::new))
                .set("redrive_counts", items.stream().map(Envelope::redriveCount).toArray(Integer[]::new))
                .set("attempts", column(items, t -> EnvelopeJson.encodeAttempts(t.attempts())))
                .set("error_types", column(items, t -> text(t.lastErrorType())))
                .set("created_ats", column(items, t -> time(t.createdAt())))
                .set("next_attempt_ats", column(items, t -> time(t.nextAttemptAt())))
                .set("lease_expires_ats", column(items, t -> time(t.leaseExpiresAt())))
                .set("completed_ats", column(items, t -> time(t.completedAt())))
                .set("dead_lettered_ats", column(items, t -> time(t.deadLetteredAt())))
                .set("cancelled_ats", column(items, t -> time(t.cancelledAt())))
                .set("retries", column(items, t -> t.retry() == null ? null : EnvelopeJson.encodeRetry(t.retry())))
                .set("priorities", items.stream().map(Envelope::priority).toArray(Integer[]::new))
                .set("claimed_bys", column(items, Envelope::claimedBy))
                .set("claimed_ats", column(items, t -> time(t.claimedAt())))
                .set("format_versions", items.stream().map(Envelope::formatVersion).toArray(Integer[]::new))
                .set("extras", column(items, t -> EnvelopeJson.encodeExtra(unknownFields(t))))
                .set("keys", column(items, t -> joinedKeys(t.keys())));
        Set<String> present = new HashSet<>(queryOne("import_tasks", params, rs -> strings(rs, "present")));
        Set<String> stored = new HashSet<>();
        for (Envelope t : items) {
            if (!present.contains(t.id())) {
                stored.add(t.id());
                announce(t.queue());
            }
        }
        List<Boolean> result = new ArrayList<>(tasks.size());
        for (Envelope t : tasks) {
            result.add(stored.remove(t.id()));
        }
        return result;
    }

    private static String[] column(List<Envelope> items, java.util.function.Function<Envelope, String> field) {
        return items.stream().map(field).toArray(String[]::new);
    }

    private static String time(Instant at) {
        return at == null ? null : Times.format(at);
    }

    @Override
    public AuditEntry appendAudit(AuditEntry entry) {
        ready();
        Limits.checkAuditEntry(entry, "entry");
        String selector = entry.selector() == null ? "{}" : entry.selector().text();
        record Row(String id, Instant time) {}
        Row row = queryOne("append_audit", Params.of().set("actor", entry.actor()).set("action", entry.action())
                .set("queue", entry.queue()).set("selector", selector).set("count", entry.count())
                .set("reason", text(entry.reason())).set("error", text(entry.error())),
                rs -> new Row(rs.getString("id"), Rows.instant(rs, "time")));
        return new AuditEntry(entry.actor(), entry.action(), entry.queue(), io.rdq.RawJson.trusted(selector),
                entry.count(), entry.reason(), entry.error(), row.id(), row.time());
    }

    @Override
    public Page<AuditEntry> listAudit(AuditFilter filter, PageRequest page) {
        ready();
        Limits.checkPage(page);
        AuditFilter f = filter == null ? AuditFilter.ALL : filter;
        String scope = Cursors.scope("audit", f.queue(), f.action(), f.actor(), f.after(), f.before());
        Params params = Params.of().set("queue", f.queue()).set("action", f.action()).set("actor", f.actor())
                .set("after", f.after()).set("before", f.before()).set("limit", page.limit() + 1);
        String keyset = "";
        if (page.cursor() != null) {
            Cursors.Position after = Cursors.decode(page.cursor(), scope);
            params.set("cursor_at", after.at()).set("cursor_id", after.id());
            keyset = "{audit_keyset}";
        }
        Sql.Statement statement = sql.get("list_audit", Map.of("keyset", keyset));
        List<AuditEntry> rows = with(conn -> {
            try (PreparedStatement ps = params.prepare(conn, statement); ResultSet rs = ps.executeQuery()) {
                List<AuditEntry> out = new ArrayList<>();
                while (rs.next()) {
                    out.add(new AuditEntry(rs.getString("actor"), rs.getString("action"), rs.getString("queue"),
                            io.rdq.RawJson.trusted(rs.getString("selector")), rs.getLong("count"), rs.getString("reason"),
                            rs.getString("error"), rs.getString("id"), Rows.instant(rs, "time")));
                }
                return out;
            }
        });
        List<AuditEntry> entries = rows.subList(0, Math.min(rows.size(), page.limit()));
        if (rows.size() <= page.limit()) {
            return new Page<>(entries, null);
        }
        AuditEntry last = entries.get(entries.size() - 1);
        return new Page<>(entries, Cursors.encode(scope, last.time(), last.id()));
    }

    // --- flow control ---------------------------------------------------------------------

    private static Control control(ResultSet rs) throws SQLException {
        String state = rs.getString("state");
        return new Control(rs.getString("queue"), rs.getString("key"), rs.getBoolean("paused"),
                optionalLong(rs, "gate"), optionalLong(rs, "concurrency"), optionalLong(rs, "rate"),
                rs.getDouble("per"), optionalLong(rs, "burst"), rs.getString("fair"), optionalDouble(rs, "aging"),
                state == null || !state.strip().startsWith("{") ? null : io.rdq.RawJson.trusted(state),
                rs.getLong("version"), Rows.instant(rs, "updated_at"), rs.getLong("in_use"));
    }

    private static Double optionalDouble(ResultSet rs, String column) throws SQLException {
        double value = rs.getDouble(column);
        return rs.wasNull() ? null : value;
    }

    private static Long optionalLong(ResultSet rs, String column) throws SQLException {
        long value = rs.getLong(column);
        return rs.wasNull() ? null : value;
    }

    private List<Control> controls(String queue, String key) {
        return query("list_controls", Params.of().set("queue", queue).set("key", key), PostgresStorage::control);
    }

    @Override
    public List<Control> listControls(String queue) {
        ready();
        if (queue != null) {
            Limits.checkQueue(queue);
        }
        return controls(queue, null);
    }

    @Override
    public Control putControl(Control control, long expectedVersion) {
        ready();
        Limits.checkControl(control, "control");
        Limits.checkVersion(expectedVersion, "expected_version");
        record Row(long version, Instant at) {}
        List<Row> rows = query("put_control", Params.of().set("queue", control.queue()).set("key", control.key())
                .set("paused", control.paused()).set("gate", control.gate()).set("concurrency", control.concurrency())
                .set("rate", control.rate()).set("per", control.per()).set("burst", control.burst())
                .set("fair", control.fair()).set("aging", control.aging())
                .set("state", control.state().text()).set("expected_version", expectedVersion),
                rs -> new Row(rs.getLong("version"), Rows.instant(rs, "updated_at")));
        if (rows.isEmpty()) {
            List<Control> found = controls(control.queue(), control.key());
            throw new ControlConflictException(control.queue(), control.key(), found.isEmpty() ? null : found.get(0));
        }
        return control.stored(rows.get(0).version(), rows.get(0).at());
    }

    @Override
    public boolean deleteControl(String queue, String key, long expectedVersion) {
        ready();
        Limits.checkQueue(queue);
        Limits.checkControlKey(key, "key");
        Limits.checkVersion(expectedVersion, "expected_version");
        long deleted = queryOne("delete_control", Params.of().set("queue", queue).set("key", key)
                .set("expected_version", expectedVersion), rs -> rs.getLong("deleted"));
        if (deleted > 0) {
            return true;
        }
        List<Control> found = controls(queue, key);
        if (!found.isEmpty()) {
            throw new ControlConflictException(queue, key, found.get(0));
        }
        return false;
    }

    @Override
    public int retryNow(String queue, List<String> taskIds) {
        ready();
        Limits.checkQueue(queue);
        Limits.checkCancelIds(taskIds);
        String[] ids = new java.util.LinkedHashSet<>(taskIds).toArray(String[]::new);
        if (ids.length == 0) {
            return 0;
        }
        int moved = update("retry_now", Params.of().set("queue", queue).set("ids", ids));
        if (moved > 0) {
            announce(queue);
        }
        return moved;
    }

    // --- the fleet and counts ----------------------------------------------------------------

    @Override
    public WorkerInfo heartbeatWorker(WorkerInfo info) {
        ready();
        Limits.checkWorkerInfo(info, "info");
        record Row(Instant started, Instant seen) {}
        Row row = queryOne("heartbeat_worker", Params.of().set("id", info.id()).set("host", text(info.host()))
                .set("pid", info.pid()).set("version", text(info.version()))
                .set("queues", info.queues().toArray(String[]::new)).set("concurrency", info.concurrency())
                .set("held", info.held()).set("state", text(info.state())).set("heartbeat", info.heartbeat())
                .set("extra", info.extra().text()),
                rs -> new Row(Rows.instant(rs, "started_at"), Rows.instant(rs, "seen_at")));
        return info.seen(row.started(), row.seen());
    }

    @Override
    public List<WorkerInfo> listWorkers() {
        ready();
        return query("list_workers", Params.of(), rs -> {
            String extra = rs.getString("extra");
            return new WorkerInfo(rs.getString("id"), rs.getString("host"), rs.getLong("pid"), rs.getString("version"),
                    Rows.strings(rs, "queues"), rs.getLong("concurrency"), rs.getLong("held"), rs.getString("state"),
                    rs.getDouble("heartbeat"), Rows.instant(rs, "started_at"), Rows.instant(rs, "seen_at"),
                    extra == null || !extra.strip().startsWith("{") ? null : io.rdq.RawJson.trusted(extra));
        });
    }

    @Override
    public boolean removeWorker(String workerId) {
        ready();
        if (Limits.checkWorkerId(workerId, "worker_id") == null) {
            throw new ValidationException("worker_id", "must be a worker id");
        }
        return update("remove_worker", Params.of().set("id", workerId)) > 0;
    }

    @Override
    public int purgeWorkers(Instant seenBefore) {
        ready();
        Limits.checkInstant(seenBefore, "seen_before");
        return update("purge_workers", Params.of().set("seen_before", seenBefore));
    }

    @Override
    public void addCounts(List<Counts> counts) {
        ready();
        Limits.checkCounts(counts, "counts");
        if (counts.isEmpty()) {
            return;
        }
        update("add_counts", Params.of()
                .set("queues", counts.stream().map(Counts::queue).toArray(String[]::new))
                .set("minutes", counts.stream().map(c -> Times.format(c.minute())).toArray(String[]::new))
                .set("succeeded", counts.stream().map(Counts::succeeded).toArray(Long[]::new))
                .set("failed", counts.stream().map(Counts::failed).toArray(Long[]::new))
                .set("dead", counts.stream().map(Counts::dead).toArray(Long[]::new))
                .set("deferred", counts.stream().map(Counts::deferred).toArray(Long[]::new)));
    }

    @Override
    public List<Counts> readCounts(String queue, Instant since) {
        ready();
        if (queue != null) {
            Limits.checkQueue(queue);
        }
        Limits.checkInstant(since, "since");
        return query("read_counts", Params.of().set("queue", queue).set("since", since), rs -> new Counts(
                rs.getString("queue"), Rows.instant(rs, "minute"), rs.getLong("succeeded"), rs.getLong("failed"),
                rs.getLong("dead"), rs.getLong("deferred")));
    }

    @Override
    public int purgeCounts(Instant before) {
        ready();
        Limits.checkInstant(before, "before");
        return update("purge_counts", Params.of().set("before", before));
    }

    // --- operations -----------------------------------------------------------------------

    @Override
    public Instant now() {
        ready();
        return queryOne("now", Params.of(), rs -> Rows.instant(rs, "now"));
    }

    @Override
    public Stats stats(String queue) {
        ready();
        Limits.checkQueue(queue);
        return stats(List.of(queue)).get(0);
    }

    @Override
    public int expireTasks(String queue, List<String> taskIds, Instant before) {
        ready();
        Limits.checkQueue(queue);
        Limits.checkCancelIds(taskIds);
        Limits.checkInstant(before, "before");
        if (taskIds.isEmpty()) {
            return 0;
        }
        String[] ids = taskIds.stream().distinct().toArray(String[]::new);
        return update("expire_tasks", Params.of().set("queue", queue).set("ids", ids).set("before", before));
    }

    @Override
    public Set<String> heldPayloadRefs(List<String> refs) {
        ready();
        Limits.checkPayloadRefs(refs);
        if (refs.isEmpty()) {
            return Set.of();
        }
        String[] asked = refs.stream().distinct().toArray(String[]::new);
        return new HashSet<>(query("held_payload_refs", Params.of().set("refs", asked), r -> r.getString("ref")));
    }

    @Override
    public int purgeSucceeded(String queue, Instant olderThan) {
        ready();
        Limits.checkQueue(queue);
        Limits.checkInstant(olderThan, "older_than");
        return (int) (long) queryOne("purge_succeeded", Params.of().set("queue", queue).set("older_than", olderThan),
                rs -> rs.getLong("n"));
    }

    @Override
    public boolean waitDue(String queue, Duration timeout) {
        ready();
        Limits.checkQueue(queue);
        if (timeout == null || timeout.isNegative()) {
            throw new ValidationException("timeout", "must be a non-negative number of seconds");
        }
        if (!config.notifications()) {
            throw new UnsupportedOperationException("notify is turned off for this store (notify=false)");
        }
        try {
            listener.ensure();
        } catch (SQLException e) {
            throw Errors.translate(e, config.endpoint());
        }
        CompletableFuture<Boolean> woken = listener.register(queue);
        try {
            record Row(Instant now, Instant nextDue) {}
            Row row = queryOne("next_due", Params.of().set("queue", queue),
                    rs -> new Row(Rows.instant(rs, "now"), Rows.instant(rs, "next_due")));
            if (row.nextDue() != null && !row.nextDue().isAfter(row.now())) {
                return true;
            }
            long waitNanos = timeout.toNanos();
            boolean timed = false;
            if (row.nextDue() != null) {
                long untilDue = Duration.between(row.now(), row.nextDue()).toNanos();
                if (untilDue < waitNanos) {
                    waitNanos = untilDue;
                    timed = true;
                }
            }
            try {
                return woken.get(waitNanos, TimeUnit.NANOSECONDS);
            } catch (TimeoutException e) {
                return timed;
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new StorageUnavailableException("interrupted while waiting for a due task");
            } catch (ExecutionException e) {
                return true;
            }
        } finally {
            listener.unregister(queue, woken);
        }
    }
}

package io.rdq;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;

/**
 * The documented limits of the contract and the checks every operation applies first, with
 * the same field names as rdq's Python {@code rdq.spi.limits}.
 */
public final class Limits {
    public static final int MAX_ID_LENGTH = 200;
    public static final int MAX_QUEUE_LENGTH = 100;
    public static final int MAX_HANDLER_REF_LENGTH = 1024;
    public static final int MAX_HEADERS = 64;
    public static final int MAX_HEADER_NAME_LENGTH = 128;
    public static final int MAX_HEADER_VALUE_LENGTH = 4096;
    public static final int MAX_PAYLOAD_BYTES = 1024 * 1024;
    /** How deeply a payload (or an unknown field's value) may nest arrays and objects. */
    public static final int MAX_DEPTH = 64;
    public static final int MAX_LIMIT = 1000;
    public static final Duration MAX_LEASE = Duration.ofHours(24);
    /** About 100 years: a task's first due time stays far inside the years every store holds. */
    public static final Duration MAX_DELAY = Duration.ofDays(36_500);
    /** The first and last instant a stored time may hold (the years 1-9999, UTC). */
    public static final Instant MIN_TIME = Instant.parse("0001-01-01T00:00:00Z");
    public static final Instant MAX_TIME = Instant.parse("9999-12-31T23:59:59.999999Z");
    public static final int MAX_SELECTOR_IDS = 10_000;
    public static final int MAX_WORKER_ID_LENGTH = 200;
    public static final int MAX_ERROR_TYPE_LENGTH = 1024;
    public static final int MAX_ERROR_MESSAGE_LENGTH = 8192;
    public static final int MAX_TRACEBACK_LENGTH = 32768;
    public static final int MAX_AUDIT_WORD_LENGTH = 200;
    public static final int MAX_AUDIT_REASON_LENGTH = 2000;
    public static final int MAX_TASK_KEYS = 8;
    public static final int MAX_TASK_KEY_LENGTH = 200;
    /** A control's key: {@code *}, {@code handler:<handlerRef>} or a task key. */
    public static final int MAX_CONTROL_KEY_LENGTH = 1100;
    public static final int MAX_CONTROL_STATE_BYTES = 64 * 1024;
    public static final int MAX_WORKER_QUEUES = 1000;
    public static final int MAX_COUNTS = 1000;
    /** A payload reference ({@code rdq-payload-ref}): {@code sha256:} and 64 hex digits as rdq
     * writes it, at most this long as any store keeps it. */
    public static final int MAX_PAYLOAD_REF_LENGTH = 200;
    public static final double DEFAULT_OPERATION_TIMEOUT = 10.0;
    public static final long EXACT_COUNT_THRESHOLD = 10_000;

    private static final Pattern ID = Pattern.compile("[A-Za-z0-9._\\-:@+=~]+");
    private static final Pattern QUEUE = Pattern.compile("[A-Za-z0-9][A-Za-z0-9._\\-:]*");

    private Limits() {}

    public static String checkTaskId(String value, String field) {
        if (value == null) {
            throw new ValidationException(field, "must be a string");
        }
        if (value.isEmpty()) {
            throw new ValidationException(field, "must not be empty");
        }
        if (value.length() > MAX_ID_LENGTH) {
            throw new ValidationException(field, "longer than " + MAX_ID_LENGTH + " characters");
        }
        if (!ID.matcher(value).matches()) {
            throw new ValidationException(field, "may hold only A-Z a-z 0-9 and . _ - : @ + = ~");
        }
        return value;
    }

    public static String checkTaskId(String value) {
        return checkTaskId(value, "id");
    }

    public static List<String> checkIds(List<String> ids, String field) {
        if (ids == null) {
            throw new ValidationException(field, "must be a list of task ids");
        }
        for (int i = 0; i < ids.size(); i++) {
            checkTaskId(ids.get(i), field + "[" + i + "]");
        }
        return ids;
    }

    public static String checkQueue(String value, String field) {
        if (value == null) {
            throw new ValidationException(field, "must be a string");
        }
        if (value.isEmpty()) {
            throw new ValidationException(field, "must not be empty");
        }
        if (value.length() > MAX_QUEUE_LENGTH) {
            throw new ValidationException(field, "longer than " + MAX_QUEUE_LENGTH + " characters");
        }
        if (!QUEUE.matcher(value).matches()) {
            throw new ValidationException(field, "must start with a letter or digit and hold only A-Z a-z 0-9 and . _ - :");
        }
        return value;
    }

    public static String checkQueue(String value) {
        return checkQueue(value, "queue");
    }

    public static int checkLimit(int value, String field) {
        if (value < 1) {
            throw new ValidationException(field, "must be at least 1");
        }
        if (value > MAX_LIMIT) {
            throw new ValidationException(field, "must be at most " + MAX_LIMIT);
        }
        return value;
    }

    public static Duration checkLease(Duration value, String field) {
        if (value == null) {
            throw new ValidationException(field, "must be a duration");
        }
        if (value.isNegative() || value.isZero()) {
            throw new ValidationException(field, "must be greater than zero");
        }
        if (value.compareTo(MAX_LEASE) > 0) {
            throw new ValidationException(field, "must be at most 24 hours");
        }
        return value;
    }

    public static Duration checkDelay(Duration value, String field) {
        if (value != null && value.isNegative()) {
            throw new ValidationException(field, "must not be negative");
        }
        if (value != null && value.compareTo(MAX_DELAY) > 0) {
            throw new ValidationException(field, "must be at most " + MAX_DELAY.toDays() + " days");
        }
        return value;
    }

    public static String checkToken(String value, String field) {
        if (value == null || value.isEmpty()) {
            throw new ValidationException(field, "must be a non-empty string");
        }
        return value;
    }

    public static Instant checkInstant(Instant value, String field) {
        if (value == null) {
            throw new ValidationException(field, "must be a datetime");
        }
        return checkTime(value, field);
    }

    /** {@code null}, or an instant within the years 1-9999 (UTC), which every store and
     * client library can hold. */
    public static Instant checkTime(Instant value, String field) {
        if (value != null && (value.isBefore(MIN_TIME) || value.isAfter(MAX_TIME))) {
            throw new ValidationException(field, "is out of range (years 1-9999 in UTC)");
        }
        return value;
    }

    public static int checkPriority(int value, String field) {
        if (value < Envelope.MIN_PRIORITY || value > Envelope.MAX_PRIORITY) {
            throw new ValidationException(field, "must be from " + Envelope.MIN_PRIORITY + " to " + Envelope.MAX_PRIORITY);
        }
        return value;
    }

    public static String checkWorkerId(String value, String field) {
        if (value == null) {
            return null;
        }
        if (value.isEmpty()) {
            throw new ValidationException(field, "must be a non-empty string or None");
        }
        if (value.length() > MAX_WORKER_ID_LENGTH) {
            throw new ValidationException(field, "longer than " + MAX_WORKER_ID_LENGTH + " characters");
        }
        if (value.chars().anyMatch(c -> c < 0x20 || c == 0x7f)) {
            throw new ValidationException(field, "must not contain control characters");
        }
        return value;
    }

    private static void checkText(String value, int limit, String field) {
        if (value != null && value.length() > limit) {
            throw new ValidationException(field, "longer than " + limit + " characters");
        }
    }

    /** An attempt record handed to a resolution: its number, outcome and the length of its texts. */
    public static Attempt checkAttempt(Attempt value, String field) {
        if (value == null) {
            throw new ValidationException(field, "must be an attempt record");
        }
        if (value.number() < 1) {
            throw new ValidationException(field + ".number", "must be an integer of at least 1");
        }
        checkText(value.errorType(), MAX_ERROR_TYPE_LENGTH, field + ".error_type");
        checkText(value.errorMessage(), MAX_ERROR_MESSAGE_LENGTH, field + ".error_message");
        checkText(value.traceback(), MAX_TRACEBACK_LENGTH, field + ".traceback");
        checkWorkerId(value.workerId(), field + ".worker_id");
        checkTime(value.startedAt(), field + ".started_at");
        checkTime(value.finishedAt(), field + ".finished_at");
        return value;
    }

    /** An envelope offered to {@code enqueue}: ids, names, headers, counters, the attempt
     * records it carries, the payload's size and nesting (and unknown fields' nesting). */
    public static Envelope checkTask(Envelope task) {
        if (task == null) {
            throw new ValidationException("task", "must be an envelope");
        }
        checkTaskId(task.id(), "id");
        checkQueue(task.queue(), "queue");
        String ref = task.handlerRef();
        if (ref == null || ref.isEmpty()) {
            throw new ValidationException("handler_ref", "must be a non-empty string");
        }
        if (ref.length() > MAX_HANDLER_REF_LENGTH) {
            throw new ValidationException("handler_ref", "longer than " + MAX_HANDLER_REF_LENGTH + " characters");
        }
        if (ref.codePoints().anyMatch(c -> Character.isWhitespace(c) || Character.isSpaceChar(c) || c < 0x20 || c == 0x7f)) {
            throw new ValidationException("handler_ref", "must not contain whitespace or control characters");
        }
        Map<String, String> headers = task.headers();
        if (headers.size() > MAX_HEADERS) {
            throw new ValidationException("headers", "more than " + MAX_HEADERS + " headers");
        }
        for (var header : headers.entrySet()) {
            String name = header.getKey();
            if (name == null || name.isEmpty() || name.length() > MAX_HEADER_NAME_LENGTH) {
                throw new ValidationException("headers", "header names must be 1-" + MAX_HEADER_NAME_LENGTH + " characters");
            }
            String value = header.getValue();
            if (value == null || value.length() > MAX_HEADER_VALUE_LENGTH) {
                throw new ValidationException("headers." + name, "must be a string of at most " + MAX_HEADER_VALUE_LENGTH + " characters");
            }
        }
        if (task.attemptCount() < 0) {
            throw new ValidationException("attempt_count", "must not be negative");
        }
        if (task.redriveCount() < 0) {
            throw new ValidationException("redrive_count", "must not be negative");
        }
        checkPriority(task.priority(), "priority");
        checkTaskKeys(task.keys(), "keys");
        checkTime(task.nextAttemptAt(), "next_attempt_at");
        if (task.corrupt() != null) {
            throw new ValidationException("corrupt", "a task read back as corrupt cannot be stored");
        }
        int size = task.payload().text().getBytes(StandardCharsets.UTF_8).length;
        if (size > MAX_PAYLOAD_BYTES) {
            throw new ValidationException("payload", "is " + size + " bytes encoded; the limit is " + MAX_PAYLOAD_BYTES);
        }
        checkDepth(task.payload(), "payload");
        for (var field : task.extra().entrySet()) {
            checkDepth(field.getValue(), field.getKey());
        }
        for (int i = 0; i < task.attempts().size(); i++) {
            checkAttempt(task.attempts().get(i), "attempts[" + i + "]");
        }
        return task;
    }

    private static boolean printable(String value) {
        return value.codePoints().noneMatch(c -> Character.isWhitespace(c) || Character.isSpaceChar(c) || c < 0x20 || c == 0x7f);
    }

    /** A task's flow-control keys: at most {@link #MAX_TASK_KEYS}, each 1-200 characters without
     * whitespace or control characters, none of them {@code *} or {@code handler:...} (keys every
     * task has already). */
    public static List<String> checkTaskKeys(List<String> keys, String field) {
        if (keys == null) {
            throw new ValidationException(field, "must be a list of strings");
        }
        if (keys.size() > MAX_TASK_KEYS) {
            throw new ValidationException(field, "more than " + MAX_TASK_KEYS + " keys");
        }
        for (int i = 0; i < keys.size(); i++) {
            String key = keys.get(i);
            String where = field + "[" + i + "]";
            if (key == null || key.isEmpty() || key.length() > MAX_TASK_KEY_LENGTH) {
                throw new ValidationException(where, "must be 1-" + MAX_TASK_KEY_LENGTH + " characters");
            }
            if (!printable(key)) {
                throw new ValidationException(where, "must not contain whitespace or control characters");
            }
            if (key.equals("*") || key.startsWith("handler:")) {
                throw new ValidationException(where, "'*' and 'handler:...' are every task's keys already");
            }
        }
        return keys;
    }

    /** A control's key: {@code *}, {@code handler:<handlerRef>}, or a task key. */
    public static String checkControlKey(String key, String field) {
        if (key == null || key.isEmpty() || key.length() > MAX_CONTROL_KEY_LENGTH) {
            throw new ValidationException(field, "must be 1-" + MAX_CONTROL_KEY_LENGTH + " characters");
        }
        if (!printable(key)) {
            throw new ValidationException(field, "must not contain whitespace or control characters");
        }
        return key;
    }

    /** A control to store: its queue and key, the limits it sets (each null or within range),
     * and state that is a JSON object within {@link #MAX_CONTROL_STATE_BYTES}. */
    public static Control checkControl(Control control, String field) {
        if (control == null) {
            throw new ValidationException(field, "must be a control");
        }
        checkQueue(control.queue(), field + ".queue");
        checkControlKey(control.key(), field + ".key");
        Object[][] numbers = {{"gate", control.gate(), 0L}, {"concurrency", control.concurrency(), 0L},
            {"rate", control.rate(), 1L}, {"burst", control.burst(), 1L}};
        for (Object[] n : numbers) {
            if (n[1] != null && (Long) n[1] < (Long) n[2]) {
                throw new ValidationException(field + "." + n[0], "must be an integer of at least " + n[2] + ", or None");
            }
        }
        checkOrder(control, field);
        double per = control.per();
        if (!(per > 0 && per <= 86_400)) {
            throw new ValidationException(field + ".per", "must be a number of seconds in (0, 86400]");
        }
        RawJson state = control.state();
        if (!state.text().strip().startsWith("{")) {
            throw new ValidationException(field + ".state", "must be an object");
        }
        checkDepth(state, field + ".state");
        int size = state.text().getBytes(StandardCharsets.UTF_8).length;
        if (size > MAX_CONTROL_STATE_BYTES) {
            throw new ValidationException(field + ".state", "is " + size + " bytes encoded; the limit is " + MAX_CONTROL_STATE_BYTES);
        }
        return control;
    }

    /** The most seconds of waiting {@code Control.aging} may make worth one step of priority. */
    public static final double MAX_AGING = 86_400;

    /** {@code fair} and {@code aging}: settings of the queue's own control (key {@code *})
     * only; {@code fair} a key prefix (1-200 characters without whitespace), {@code aging}
     * seconds in (0, 86400]. */
    private static void checkOrder(Control control, String field) {
        if ((control.fair() != null || control.aging() != null) && !"*".equals(control.key())) {
            String name = control.fair() != null ? "fair" : "aging";
            throw new ValidationException(field + "." + name,
                    "is a setting of the queue's own control (key '*'), not of a key's");
        }
        String fair = control.fair();
        if (fair != null && (fair.isEmpty() || fair.length() > MAX_TASK_KEY_LENGTH || !printable(fair))) {
            throw new ValidationException(field + ".fair", "must be a key prefix of 1-" + MAX_TASK_KEY_LENGTH
                    + " characters without whitespace, or None");
        }
        Double aging = control.aging();
        if (aging != null && !(aging > 0 && aging <= MAX_AGING)) {
            throw new ValidationException(field + ".aging", "must be a number of seconds in (0, 86400], or None");
        }
    }

    /** A control version a caller expects: 0 (none yet) or more. */
    public static long checkVersion(long version, String field) {
        if (version < 0) {
            throw new ValidationException(field, "must be a non-negative integer");
        }
        return version;
    }

    /** A worker's registration: a valid id, texts and numbers in range, its queues valid. */
    public static WorkerInfo checkWorkerInfo(WorkerInfo info, String field) {
        if (info == null) {
            throw new ValidationException(field, "must be a worker registration");
        }
        if (checkWorkerId(info.id(), field + ".id") == null) {
            throw new ValidationException(field + ".id", "must be a worker id");
        }
        checkText(info.host(), MAX_AUDIT_WORD_LENGTH, field + ".host");
        checkText(info.version(), MAX_AUDIT_WORD_LENGTH, field + ".version");
        checkText(info.state(), MAX_AUDIT_WORD_LENGTH, field + ".state");
        Object[][] numbers = {{"pid", info.pid()}, {"concurrency", info.concurrency()}, {"held", info.held()}};
        for (Object[] n : numbers) {
            if ((Long) n[1] < 0) {
                throw new ValidationException(field + "." + n[0], "must be a non-negative integer");
            }
        }
        double beat = info.heartbeat();
        if (!(beat > 0 && beat <= 3600)) {
            throw new ValidationException(field + ".heartbeat", "must be a number of seconds in (0, 3600]");
        }
        if (info.queues().size() > MAX_WORKER_QUEUES) {
            throw new ValidationException(field + ".queues", "must be a list of at most " + MAX_WORKER_QUEUES);
        }
        for (int i = 0; i < info.queues().size(); i++) {
            checkQueue(info.queues().get(i), field + ".queues[" + i + "]");
        }
        if (!info.extra().text().strip().startsWith("{")) {
            throw new ValidationException(field + ".extra", "must be an object");
        }
        checkDepth(info.extra(), field + ".extra");
        return info;
    }

    /** Counts to add: at most {@link #MAX_COUNTS} entries, each of a valid queue, a whole
     * minute and non-negative numbers. */
    public static List<Counts> checkCounts(List<Counts> counts, String field) {
        if (counts == null) {
            throw new ValidationException(field, "must be a list of counts");
        }
        if (counts.size() > MAX_COUNTS) {
            throw new ValidationException(field, "more than " + MAX_COUNTS + " entries");
        }
        for (int i = 0; i < counts.size(); i++) {
            String where = field + "[" + i + "]";
            Counts entry = counts.get(i);
            if (entry == null) {
                throw new ValidationException(where, "must be counts");
            }
            checkQueue(entry.queue(), where + ".queue");
            Instant minute = checkInstant(entry.minute(), where + ".minute");
            if (minute.getEpochSecond() % 60 != 0 || minute.getNano() != 0) {
                throw new ValidationException(where + ".minute", "must be a whole minute");
            }
            Object[][] numbers = {{"succeeded", entry.succeeded()}, {"failed", entry.failed()},
                {"dead", entry.dead()}, {"deferred", entry.deferred()}};
            for (Object[] n : numbers) {
                if ((Long) n[1] < 0) {
                    throw new ValidationException(where + "." + n[0], "must be a non-negative integer");
                }
            }
        }
        return counts;
    }

    /** A JSON value that nests arrays and objects at most {@link #MAX_DEPTH} levels deep. */
    public static RawJson checkDepth(RawJson value, String field) {
        if (value != null && value.depth() > MAX_DEPTH) {
            throw new ValidationException(field, "nests deeper than " + MAX_DEPTH + " levels");
        }
        return value;
    }

    /** The field holding the time a task of {@code status} is listed by. */
    public static String statusTimeField(Status status) {
        return switch (status) {
            case PENDING -> "next_attempt_at";
            case IN_FLIGHT -> "lease_expires_at";
            case SUCCEEDED -> "completed_at";
            case DEAD -> "dead_lettered_at";
            case CANCELLED -> "cancelled_at";
        };
    }

    /** A task offered to {@code importTasks}: everything {@link #checkTask} checks (every
     * attempt valid), then {@code created_at} and its status time set and {@code claimed_by}
     * valid. */
    public static Envelope checkImportedTask(Envelope task) {
        checkTask(task);
        if (task.createdAt() == null) {
            throw new ValidationException("created_at", "must be set on an imported " + task.status() + " task");
        }
        if (task.statusTime() == null) {
            throw new ValidationException(statusTimeField(task.status()), "must be set on an imported " + task.status() + " task");
        }
        checkWorkerId(task.claimedBy(), "claimed_by");
        checkTime(task.createdAt(), "created_at");
        checkTime(task.leaseExpiresAt(), "lease_expires_at");
        checkTime(task.claimedAt(), "claimed_at");
        checkTime(task.completedAt(), "completed_at");
        checkTime(task.deadLetteredAt(), "dead_lettered_at");
        checkTime(task.cancelledAt(), "cancelled_at");
        return task;
    }

    public static List<Envelope> checkImportedTasks(List<Envelope> tasks) {
        if (tasks == null) {
            throw new ValidationException("tasks", "must be a list of envelopes");
        }
        if (tasks.size() > MAX_LIMIT) {
            throw new ValidationException("tasks", "more than " + MAX_LIMIT + " tasks");
        }
        tasks.forEach(Limits::checkImportedTask);
        return tasks;
    }

    /** The ids given to {@code cancel}. */
    public static final int MAX_DEDUP_KEY_LENGTH = 200;

    /** The dedup settings of {@link Storage#admit}, as {@code rdq.spi.bounds.check_dedup}
     * checks them (the same fields named). */
    public static Dedup checkDedup(Dedup dedup) {
        if (dedup == null) {
            throw new ValidationException("dedup", "must be a dedup setting");
        }
        String key = dedup.key();
        if (key == null || key.isEmpty() || key.codePointCount(0, key.length()) > MAX_DEDUP_KEY_LENGTH) {
            throw new ValidationException("dedup.key", "must be 1-" + MAX_DEDUP_KEY_LENGTH + " characters");
        }
        if (key.codePoints().anyMatch(c -> Character.isWhitespace(c) || Character.isSpaceChar(c) || c < 0x20 || c == 0x7f)) {
            throw new ValidationException("dedup.key", "must not contain whitespace or control characters");
        }
        if (!Dedup.MODES.contains(dedup.mode())) {
            throw new ValidationException("dedup.mode", "must be one of " + String.join(", ", Dedup.MODES));
        }
        double longest = MAX_DELAY.getSeconds();
        checkSeconds(dedup.window(), longest, "dedup.window");
        checkSeconds(dedup.maxAge(), longest, "dedup.max_age");
        if (dedup.mode().equals("extend") && dedup.window() == null) {
            throw new ValidationException("dedup.window", "extend starts the window again: give one");
        }
        if (dedup.mode().equals("debounce") && dedup.maxAge() == null) {
            throw new ValidationException("dedup.max_age", "debounce needs a max_age");
        }
        return dedup;
    }

    /** The references of {@link Storage#heldPayloadRefs}, as {@code rdq.spi.bounds.check_payload_refs}
     * checks them: at most {@link #MAX_LIMIT}, each 1-{@link #MAX_PAYLOAD_REF_LENGTH} characters
     * without whitespace or control characters. */
    public static List<String> checkPayloadRefs(List<String> refs) {
        if (refs == null) {
            throw new ValidationException("refs", "must be a list of payload references");
        }
        if (refs.size() > MAX_LIMIT) {
            throw new ValidationException("refs", "more than " + MAX_LIMIT + " references");
        }
        for (int i = 0; i < refs.size(); i++) {
            String ref = refs.get(i);
            String field = "refs[" + i + "]";
            if (ref == null || ref.isEmpty() || ref.codePointCount(0, ref.length()) > MAX_PAYLOAD_REF_LENGTH) {
                throw new ValidationException(field, "must be 1-" + MAX_PAYLOAD_REF_LENGTH + " characters");
            }
            if (ref.codePoints().anyMatch(c -> Character.isWhitespace(c) || Character.isSpaceChar(c) || c < 0x20 || c == 0x7f)) {
                throw new ValidationException(field, "must not contain whitespace");
            }
        }
        return refs;
    }

    private static void checkSeconds(Double seconds, double longest, String field) {
        if (seconds != null && !(seconds > 0 && seconds <= longest)) {
            throw new ValidationException(field, "must be more than 0 and at most " + (long) longest + " seconds");
        }
    }

    public static List<String> checkCancelIds(List<String> ids) {
        if (ids == null) {
            throw new ValidationException("ids", "must be a list of task ids");
        }
        if (ids.size() > MAX_SELECTOR_IDS) {
            throw new ValidationException("ids", "more than " + MAX_SELECTOR_IDS + " ids");
        }
        return checkIds(ids, "ids");
    }

    public static TaskFilter checkTaskFilter(TaskFilter filter) {
        if (filter == null || filter.status() == null) {
            throw new ValidationException("filter", "must be a task filter with a status");
        }
        checkTime(filter.after(), "filter.after");
        checkTime(filter.before(), "filter.before");
        return filter;
    }

    public static PageRequest checkPage(PageRequest page) {
        if (page == null) {
            throw new ValidationException("page", "must be a page request");
        }
        checkLimit(page.limit(), "page.limit");
        return page;
    }

    public static Selector checkSelector(Selector selector) {
        if (selector == null) {
            throw new ValidationException("selector", "must be a selector");
        }
        if (selector.ids() != null) {
            if (selector.ids().size() > MAX_SELECTOR_IDS) {
                throw new ValidationException("selector.ids", "more than " + MAX_SELECTOR_IDS + " ids");
            }
            checkIds(selector.ids(), "selector.ids");
        }
        if (selector.filter() != null) {
            checkTime(selector.filter().deadLetteredAfter(), "selector.filter.dead_lettered_after");
            checkTime(selector.filter().deadLetteredBefore(), "selector.filter.dead_lettered_before");
        }
        return selector;
    }

    public static AuditEntry checkAuditEntry(AuditEntry entry, String field) {
        if (entry == null) {
            throw new ValidationException(field, "must be an audit entry");
        }
        for (var word : new String[][] {{"actor", entry.actor()}, {"action", entry.action()}}) {
            if (word[1] == null || word[1].isEmpty()) {
                throw new ValidationException(field + "." + word[0], "must be a non-empty string");
            }
            checkText(word[1], MAX_AUDIT_WORD_LENGTH, field + "." + word[0]);
        }
        checkQueue(entry.queue(), field + ".queue");
        checkText(entry.reason(), MAX_AUDIT_REASON_LENGTH, field + ".reason");
        checkText(entry.error(), MAX_ERROR_MESSAGE_LENGTH, field + ".error");
        if (entry.count() < 0) {
            throw new ValidationException(field + ".count", "must be a non-negative integer");
        }
        if (entry.selector() != null && !entry.selector().isNull() && !entry.selector().text().strip().startsWith("{")) {
            throw new ValidationException(field + ".selector", "must be an object");
        }
        return entry;
    }
}

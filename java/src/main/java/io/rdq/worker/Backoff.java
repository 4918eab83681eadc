package io.rdq.worker;

import io.rdq.ConfigException;
import java.util.Locale;
import java.util.random.RandomGenerator;

/**
 * How long to wait before the next attempt of a task that failed: the same policies as rdq's
 * Python engine ({@code rdq.policy}). Durations in seconds.
 *
 * @param kind exponential (full jitter), fixed or linear
 * @param base the first delay (exponential, linear) or every delay (fixed)
 * @param cap the longest delay
 */
public record Backoff(Kind kind, double base, double cap) {
    private static final int MAX_EXPONENT = 62;

    /** How the delay grows with the attempt number. */
    public enum Kind {
        /** {@code uniform(0, min(cap, base * 2^(n-1)))}: exponential with full jitter. */
        EXPONENTIAL,
        /** Always {@code base}. */
        FIXED,
        /** {@code min(cap, base * n)}. */
        LINEAR;

        /** The kind named as in rdq's configuration ({@code "exponential"}, ...), or null. */
        public static Kind named(String name) {
            if (name == null) {
                return null;
            }
            for (Kind kind : values()) {
                if (kind.name().toLowerCase(Locale.ROOT).equals(name)) {
                    return kind;
                }
            }
            return null;
        }
    }

    public Backoff {
        if (kind == null) {
            throw new ConfigException("backoff", "give a backoff kind");
        }
        if (!(base >= 0) || !Double.isFinite(base)) {
            throw new ConfigException("base", "must be a finite number of seconds, not negative");
        }
        if (!(cap >= 0) || !Double.isFinite(cap)) {
            throw new ConfigException("cap", "must be a finite number of seconds, not negative");
        }
        if (cap < base) {
            throw new ConfigException("cap", "must not be smaller than base");
        }
    }

    public static Backoff exponential(double base, double cap) {
        return new Backoff(Kind.EXPONENTIAL, base, cap);
    }

    public static Backoff fixed(double delay) {
        return new Backoff(Kind.FIXED, delay, delay);
    }

    public static Backoff linear(double base, double cap) {
        return new Backoff(Kind.LINEAR, base, cap);
    }

    /** The smallest and largest delay (seconds) after failed attempt number {@code attempt}. */
    public double[] bounds(int attempt) {
        int n = Math.max(1, attempt);
        return switch (kind) {
            case FIXED -> new double[] {base, base};
            case LINEAR -> {
                double high = Math.min(cap, base * n);
                yield new double[] {high, high};
            }
            case EXPONENTIAL -> new double[] {0.0, Math.min(cap, base * Math.pow(2.0, Math.min(n - 1, MAX_EXPONENT)))};
        };
    }

    /** The delay (seconds) before the retry that follows failed attempt number {@code attempt}. */
    public double delay(int attempt, RandomGenerator random) {
        double[] range = bounds(attempt);
        if (range[0] == range[1]) {
            return range[1];
        }
        return range[0] + random.nextDouble() * (range[1] - range[0]);
    }
}

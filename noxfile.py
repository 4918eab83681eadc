"""Developer and CI sessions. `nox` runs lint and every package's tests; see README.md.

Sessions install the workspace packages editable into a fresh virtualenv (uv when present).
Test servers (PostgreSQL, Redis, a MongoDB-protocol server) are started by the test fixtures
themselves unless RDQ_TEST_POSTGRES_URL / RDQ_TEST_REDIS_URL / RDQ_TEST_MONGO_URL are set.
"""

from __future__ import annotations

from pathlib import Path

import nox

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["lint", "tests", "java"]
nox.options.reuse_existing_virtualenvs = True

PYTHON = "3.11"
PACKAGES = {
    "core": "rdq-core",
    "memory": "rdq-memory",
    "compliance": "rdq-compliance",
    "postgres": "rdq-postgres",
    "redis": "rdq-redis",
    "mongo": "rdq-mongo",
    "sqlite": "rdq-sqlite",
}
BACKENDS = ["memory", "postgres", "redis", "mongo", "sqlite"]
TEST_DIRS = {name: f"packages/{dist}/tests" for name, dist in PACKAGES.items()} | {
    "bench": "bench/tests"
}
DEV = [
    "pytest>=8.3",
    "pytest-asyncio>=1.0",
    "pytest-xdist>=3.6",
    "pytest-timeout>=2.3",
    "hypothesis>=6.100",
    "secantusdb==0.7.0b3",
]
PARALLEL = ["-n", "2"]
"""pytest-xdist: two processes per test session. Most tests wait on a server, a subprocess or
a timer, so two share two cores well (rdq-core's tests: 8 minutes in one process, under 5 in
two); each process starts its own test servers."""
SERIAL = {"memory", "compliance", "bench"}
"""Packages whose tests keep the cores busy in one process (or take seconds): two processes
gain nothing there (rdq-compliance's: 86 s in one, 97 s in two)."""
WIDE = {"core": ["-n", "4"]}
"""rdq-core's tests wait more than they compute (real processes, browsers, servers, leases
and breakers on the real clock: 3 min 37 s of CPU over 4 min 10 s in two processes), so four
processes keep two cores busier: 3 min 01-08 s in four."""


def processes(package: str) -> list[str]:
    return [] if package in SERIAL else WIDE.get(package, PARALLEL)


def install_workspace(session: nox.Session) -> None:
    """Every package of the repository, editable, with its test extras."""
    args: list[str] = []
    for name, dist in PACKAGES.items():
        extras = "[server,test]" if name == "core" else "[test]"
        args += ["-e", f"packages/{dist}{extras}"]
    session.install(*args, *DEV)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff (lint and format check) and mypy --strict over every package."""
    install_workspace(session)
    session.install("ruff>=0.8", "mypy>=1.13", "asyncpg-stubs>=0.30")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")


@nox.session(python=PYTHON)
@nox.parametrize("package", list(TEST_DIRS))
def tests(session: nox.Session, package: str) -> None:
    """One package's tests (real servers for the backends); "bench" tests the benchmark's
    own reporting."""
    install_workspace(session)
    session.run("pytest", TEST_DIRS[package], "-q", *processes(package), *session.posargs)


@nox.session(python=PYTHON)
@nox.parametrize("backend", BACKENDS)
def compliance(session: nox.Session, backend: str) -> None:
    """Only the compliance kit (rdq_compliance.StorageSuite) against one backend: the
    backend's ``tests/test_kit*.py`` modules."""
    install_workspace(session)
    modules = sorted(
        str(p) for p in Path(f"packages/{PACKAGES[backend]}/tests").glob("test_kit*.py")
    )
    if not modules:
        session.error(f"no test_kit*.py module in packages/{PACKAGES[backend]}/tests")
    session.run("pytest", *modules, "-q", *processes(backend), *session.posargs)


@nox.session(python=PYTHON)
def java(session: nox.Session) -> None:
    """The Java binding (java/): build it (javac -Xlint:all -Werror, its JUnit tests), then run
    the compliance kit through the bridge and the cross-language tests (java/tests)."""
    install_workspace(session)
    session.install("-e", "java/bridge")
    session.run("bash", "java/build.sh", external=True)
    classpath = Path("java/build/classpath").read_text(encoding="utf-8").strip()
    session.run(
        "pytest",
        "java/tests",
        "-q",
        *PARALLEL,
        *session.posargs,
        env={"RDQ_JAVA_CLASSPATH": classpath},
    )


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """The contention benchmark: `nox -s bench -- URL [options]` (see BENCHMARKS.md)."""
    install_workspace(session)
    session.run("python", "-m", "rdq_compliance.bench", *session.posargs)


@nox.session(python=PYTHON)
def bench_e2e(session: nox.Session) -> None:
    """End-to-end benchmark beside PgQueuer and procrastinate: `nox -s bench_e2e -- [ARGS]`
    (see BENCHMARKS.md, "End to end"). The peers are installed in this session only."""
    session.install(
        "-e",
        "packages/rdq-core",
        "-e",
        "packages/rdq-memory",
        "-e",
        "packages/rdq-compliance",
        "-e",
        "packages/rdq-postgres",
        "-e",
        "packages/rdq-sqlite",
        "-r",
        "bench/requirements-peers.txt",
    )
    session.run("python", "-m", "bench.e2e", *session.posargs)

"""Shared fixtures: the simulator on real loopback sockets, and the engine wired to it."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from swarm_tui.core.events import Event
from swarm_tui.core.records import TaskHead
from swarm_tui.engine.bodies import TaskBodies
from swarm_tui.engine.routing import SingleGateway
from swarm_tui.engine.runner import RunPolicy, SwarmRunner
from swarm_tui.gateway.client import GatewayClient
from swarm_tui.prices import load_price_table
from swarm_tui.settings.run_sections import RetryConfig
from swarm_tui.settings.sections import RoutingConfig
from swarm_tui.sim.server import SimServer
from swarm_tui.sim.settings import SimSettings
from swarm_tui.store.target import PgTarget
from swarm_tui.workload import Task
from tests.pg_server import ThrowawayPostgres

TEST_KEY = "sk-test-0123456789abcdefghijklmnop"


def pytest_configure(config: pytest.Config) -> None:
    """Our modules compiled once, before the workers start, as an install leaves them (pip
    compiles at install). The suite starts hundreds of swarm-tui processes; where
    PYTHONDONTWRITEBYTECODE is set (this image sets it) each compiled every module it
    imports again, ~0.08 s of CPU a process that no user's copy spends."""
    if not hasattr(config, "workerinput"):  # the controller, not each xdist worker
        import compileall

        compileall.compile_dir(Path(__file__).parent.parent / "swarm_tui", quiet=1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long tests (marked slow: seconds to tens of seconds, mostly waiting on servers
    and child processes) are handed out first, so the short ones fill the workers' gaps
    instead of a 30 s test starting last and running alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _never_the_users_own_dirs(tmp_path_factory, monkeypatch) -> None:
    """No test reads the developer's config, themes, runs database or cached config."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "state"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    monkeypatch.delenv("SWARM_TUI_CONFIG", raising=False)
    # a machine behind a proxy (HTTP_PROXY set): the suite's servers are on this host's
    # loopback, which a proxy elsewhere cannot reach; runs follow the environment's proxy
    # (tests/functional/test_gateway_egress.py sets its own)
    for name in ("NO_PROXY", "no_proxy"):
        kept = os.environ.get(name, "")
        monkeypatch.setenv(name, ",".join(filter(None, (kept, "127.0.0.1,localhost,::1"))))


@pytest.fixture(scope="session")
def pg_server() -> Iterator[ThrowawayPostgres]:
    """One throwaway PostgreSQL for the session (tests/pg_server.py); each test that uses
    it gets a database of its own. CI has the server (.ci/run installs it): there a
    missing one fails the suite instead of skipping."""
    yield from throwaway_pg()


def throwaway_pg(durable: bool = False,
                 tls: tuple[bytes, bytes] | None = None) -> Iterator[ThrowawayPostgres]:
    """A started throwaway server for a fixture (skipped without PostgreSQL, but in CI)."""
    try:
        server = ThrowawayPostgres(durable=durable, tls=tls)
    except FileNotFoundError as e:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(e))
    server.start()
    try:
        yield server
    finally:  # also when a test closes the generator itself (gen.close() skips the rest)
        server.stop()


_databases = itertools.count()


def new_pg_database(server: ThrowawayPostgres) -> PgTarget:
    import psycopg

    name = f"t{next(_databases)}"
    with psycopg.connect(server.url(), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    return PgTarget(server.url(name))


def pg_login(server: ThrowawayPostgres, target: PgTarget, login: str,
             role: str = "swarm_tui_reader") -> PgTarget:
    """A person's login on the server (made once), granted one of the roles `db init
    --roles` made: the database as that person reaches it."""
    import psycopg

    with psycopg.connect(server.url(), autocommit=True) as admin:
        admin.execute("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = "
                      f"'{login}') THEN CREATE ROLE {login} LOGIN; END IF; END $$")
        admin.execute(f"GRANT {role} TO {login}")
    return PgTarget(target.url.replace("postgresql://postgres@", f"postgresql://{login}@", 1))


@pytest.fixture(params=["sqlite", "postgresql"])
def db_target(request, tmp_path) -> Path | PgTarget:
    """A fresh, empty database on each back end: the store suite runs on both."""
    if request.param == "sqlite":
        return tmp_path / "runs.db"
    return new_pg_database(request.getfixturevalue("pg_server"))


@pytest.fixture
def any_db(db_target, no_user_config, monkeypatch) -> Path | PgTarget:
    """The commands' database (SWARM_TUI_DB) on each back end in turn."""
    monkeypatch.setenv("SWARM_TUI_DB", db_target.url if isinstance(db_target, PgTarget)
                       else str(db_target))
    return db_target


def raw_rows(target: Path | PgTarget, sql: str, params: Sequence = ()) -> list[tuple]:
    """Rows read past the store, with the driver of the back end (the store's `?`)."""
    if isinstance(target, PgTarget):
        import psycopg

        from swarm_tui.store.pg import translate

        with psycopg.connect(target.url) as c:  # commits on leaving
            cur = c.execute(translate(sql), tuple(params))
            return [tuple(r) for r in cur.fetchall()] if cur.description else []
    # mode=rw: a poll before the run made its database must not create it (0644, and the
    # run would then warn that others may read it and run on a file the test made)
    with contextlib.closing(sqlite3.connect(f"file:{target}?mode=rw", uri=True,
                                            timeout=10)) as c, c:
        return c.execute(sql, params).fetchall()


@pytest.fixture
def sim_factory() -> Iterator:
    servers: list[SimServer] = []

    def start(**settings) -> SimServer:
        settings.setdefault("rate_429", 0.0)
        settings.setdefault("rate_503", 0.0)
        settings.setdefault("seed", 1)
        server = SimServer(SimSettings(**settings)).start()
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.stop()


@pytest.fixture
def sim(sim_factory) -> SimServer:
    return sim_factory(profile="fixed:50")


def tasks(n: int, max_tokens: int = 64, prefix: str = "t", **extra) -> list[Task]:
    return [Task(id=f"{prefix}{i}", prompt=f"task {i}: summarise this", max_tokens=max_tokens,
                 **extra) for i in range(n)]


class Recorder:
    """An event consumer that keeps (kind, task id, attempt number, at_ms) tuples."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str | None, int | None, float]] = []

    def __call__(self, e: Event) -> None:
        self.events.append((e.kind, e.record.id if e.record else None,
                            e.attempt.number if e.attempt else None, e.at_ms))

    def kinds(self, kind: str) -> list[tuple[str, str | None, int | None, float]]:
        return [e for e in self.events if e[0] == kind]


def make_client(server: SimServer, *, keys: list[str] | None = None, stream: bool = True,
                timeout_s: float = 10.0, pool: int = 200, name: str = "sim") -> GatewayClient:
    return GatewayClient(name, server.base_url, [(k, None) for k in (keys or [TEST_KEY])],
                         pool=pool, timeout_s=timeout_s, stream=stream, simulated=True)


def make_runner(
    gateway: GatewayClient, task_list: Sequence[Task | TaskHead], *, concurrency: int = 100,
    retry: RetryConfig | None = None, routing: RoutingConfig | None = None,
    consumers=(), seed: int = 3, bodies: TaskBodies | None = None,
) -> SwarmRunner:
    policy = RunPolicy(concurrency, retry or RetryConfig(base_backoff_s=0.01, max_backoff_s=0.05),
                       routing or RoutingConfig(), "deepseek-v3.2")
    prices = load_price_table(None, {}, "test")
    return SwarmRunner(task_list, {gateway.name: gateway}, SingleGateway(gateway.name), policy,
                       prices, consumers, seed=seed, bodies=bodies)


@contextlib.asynccontextmanager
async def client_for(server: SimServer, **kw):
    gw = make_client(server, **kw)
    try:
        yield gw
    finally:
        await gw.aclose()


# -- the command line as a user runs it ----------------------------------------------------
def swarm(*args: str, env: dict[str, str] | None = None, timeout: float = 90):
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "swarm_tui", *args], capture_output=True,
                          text=True, timeout=timeout, env=full_env, stdin=subprocess.DEVNULL)


async def stored_snapshot(db, run_id: str, **kw):
    """The console's snapshot of a stored run as a fresh `StoreSource` builds it (`at=`,
    `replay=`), the source closed after."""
    from swarm_tui.run_sources import StoreSource

    source = StoreSource(db, run_id, **kw)
    await source.open()
    try:
        return await source.snapshot()
    finally:
        await source.close()


def demo_run(tmp: Path, *flags: str) -> tuple[Path, str, dict[str, str]]:
    """A real headless `run --demo` into tmp/runs.db (no user config): the database, the
    run's id and the environment that reaches it. Exit 3 (the demo missed its SLA) is a
    run like any other here."""
    env = {"SWARM_TUI_DB": str(tmp / "runs.db"), "XDG_CONFIG_HOME": str(tmp / "x")}
    r = swarm("run", "--demo", *flags, "--headless", "--quiet", "--json", env=env, timeout=120)
    assert r.returncode in (0, 3), r.stderr
    return tmp / "runs.db", json.loads(r.stdout)["run_id"], env


@pytest.fixture
def no_user_config(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.delenv("SWARM_TUI_CONFIG", raising=False)
    monkeypatch.setenv("SWARM_TUI_DB", str(tmp_path / "runs.db"))


def wait_until(pred: Callable[[], object], what: str, timeout: float = 60.0,
               seen: Callable[[], object] | None = None) -> None:
    """Wait on state, never on time alone (the deadline only stops a broken test). When it
    runs out it says what it waited for and, with `seen`, what it saw last."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            last = f"; last seen: {seen()!r}" if seen is not None else ""
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}{last}")
        time.sleep(0.05)


async def until(pred: Callable[[], object], timeout: float = 60.0) -> None:
    """The same, from a test's event loop."""
    async with asyncio.timeout(timeout):
        while not pred():
            await asyncio.sleep(0.05)


def assert_one_line_error(r, code: int, *needles: str):
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def script_server(script: str) -> tuple[subprocess.Popen, int]:
    """A server written as a Python script (argv[1]: its port), in its own process and
    listening when this returns: a third party's gateway, scripted for one test."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", script, str(port)])
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise AssertionError(f"the scripted server never listened on {port}") from None
            time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]




@pytest.fixture
def stored_runs_db(tmp_path):
    """A database with three finished runs of fixed figures (for history pictures)."""
    import json
    import sqlite3

    from swarm_tui.store.schema import MIGRATIONS, SCHEMA_VERSION

    path = tmp_path / "runs.db"
    raw = sqlite3.connect(path)
    for script in MIGRATIONS:
        raw.executescript(script)
    raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    # long names and a four-figure cost: the 80-column table keeps its figures whole
    for i, (name, p95, ok) in enumerate((("gateway-a-nightly-reindex", 278.0, 1.0),
                                         ("direct", 720.0, 0.968), (None, 301.0, 0.995))):
        run_id = f"20261201-1{i}0000-000{i}"
        summary = {"run_id": run_id, "total": 100, "succeeded": round(100 * ok),
                   "failed": 100 - round(100 * ok), "cancelled": 0, "success_rate": ok,
                   "latency_ms": {"p50": p95 * 0.65, "p95": p95, "p99": p95 * 1.5},
                   "cost_usd": 0.06 + i / 100 + (1234.5 if i == 1 else 0.0),
                   "wall_ms": 2340.0}
        raw.execute("INSERT INTO runs (id, name, status, simulated, started_at, heartbeat_at, "
                    "wall_ms, total, workload_hash, config_json, summary_json) "
                    "VALUES (?, ?, 'finished', 1, ?, ?, 2340, 100, 'h', '{}', ?)",
                    (run_id, name, 1_796_000_000 + i * 3600, 1_796_000_000 + i * 3600,
                     json.dumps(summary)))
    raw.commit()
    raw.close()
    return path


@pytest.fixture
def cfg(tmp_path, monkeypatch):
    """No user config: the built-in simulator."""
    from swarm_tui.settings.loader import load_config

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("SWARM_TUI_CONFIG", raising=False)
    return load_config(None)


def start_sim_process(*args: str) -> tuple[subprocess.Popen, int]:
    """`swarm-tui sim` in its own process on a free port (its /sim/stats counts requests)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "swarm_tui", "sim", "--port", str(port),
                             "--rate-429", "0", "--rate-503", "0", *args],
                            stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    assert proc.stdout is not None and "SIMULATED" in proc.stdout.readline()
    return proc, port


def sim_gateway(tmp_path: Path, profile: str) -> Iterator[tuple[int, Path]]:
    """`swarm-tui sim` in its own process, and a config pointing a gateway at it."""
    proc, port = start_sim_process("--profile", profile)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[gateways.local]\nbase_url = "http://127.0.0.1:{port}/v1"\n'
                   'key_env = ["GW_KEY"]\n')
    yield port, cfg
    proc.terminate()
    proc.wait(10)


@pytest.fixture
def slow_sim(tmp_path):
    """A gateway every worker reaches: 200 ms calls, no errors (every request is a task's)."""
    yield from sim_gateway(tmp_path, "fixed:200")


@pytest.fixture
def sim_proc(tmp_path):
    yield from sim_gateway(tmp_path, "fixed:50")


class Receiver:
    """A local HTTP receiver that records every POST (or refuses with `status`)."""

    def __init__(self, status: int = 200) -> None:
        self.posts: list[tuple[str, bytes]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.posts.append((self.path, body))
                self.send_response(status)
                self.end_headers()

            def log_message(self, *a) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def json(self, path: str = "/hook") -> list[dict]:
        return [json.loads(b) for p, b in self.posts if p == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()

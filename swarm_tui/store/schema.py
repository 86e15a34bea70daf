"""Schema, versioned by PRAGMA user_version and moved forward by these migrations.

Each entry takes a database at version i to version i+1. Never edit a released
entry: append a new one.
"""

from __future__ import annotations

MIGRATIONS: list[str] = [
    # 0 -> 1: runs, their tasks and every attempt
    """
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        name TEXT,
        status TEXT NOT NULL,          -- running | finished | cancelled | budget_stopped
        simulated INTEGER NOT NULL,
        started_at REAL NOT NULL,      -- unix seconds
        finished_at REAL,
        heartbeat_at REAL NOT NULL,    -- refreshed by the writer while the run is alive
        pid INTEGER,
        host TEXT,
        wall_ms REAL NOT NULL DEFAULT 0,  -- summed over the run's sessions (run + resumes)
        total INTEGER NOT NULL,
        workload_hash TEXT NOT NULL,
        config_json TEXT NOT NULL,     -- settings snapshot; never a key
        summary_json TEXT              -- the summary as of the last session's end
    );
    -- what was asked: written once when the run is created
    CREATE TABLE tasks (
        run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        task_id TEXT NOT NULL,
        task_json TEXT NOT NULL,       -- the workload line, so resume needs no file
        model TEXT NOT NULL,           -- as routed at the start (a fallback may change it)
        gateway TEXT NOT NULL,
        bucket TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    );
    CREATE UNIQUE INDEX tasks_by_task_id ON tasks(run_id, task_id);
    -- what came of it: inserted once per final state. Kept apart from `tasks` so a
    -- result is an INSERT, not a rewrite of the prompt row (measured ~1.8x faster).
    CREATE TABLE results (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        state TEXT NOT NULL,           -- succeeded | failed | cancelled
        model TEXT NOT NULL,
        gateway TEXT NOT NULL,
        bucket TEXT NOT NULL,
        key_fp TEXT,
        attempts INTEGER NOT NULL,
        tokens_in INTEGER NOT NULL,
        tokens_out INTEGER NOT NULL,
        cached_in INTEGER NOT NULL,
        usage_estimated INTEGER NOT NULL,
        cost_usd REAL,                 -- NULL: unpriced model (never $0)
        latency_ms REAL,
        ttft_ms REAL,
        queue_ms REAL NOT NULL,
        status_code INTEGER,
        error_class TEXT,
        error_message TEXT,
        response_text TEXT,
        finished_at REAL NOT NULL,
        PRIMARY KEY (run_id, seq),
        FOREIGN KEY (run_id, seq) REFERENCES tasks(run_id, seq) ON DELETE CASCADE
    );
    -- one row per task, finished or not: what reports, exports and readers use
    CREATE VIEW task_results AS
    SELECT t.run_id, t.seq, t.task_id, COALESCE(r.state, 'queued') AS state,
           COALESCE(r.model, t.model) AS model, COALESCE(r.gateway, t.gateway) AS gateway,
           COALESCE(r.bucket, t.bucket) AS bucket, r.key_fp, COALESCE(r.attempts, 0) AS attempts,
           COALESCE(r.tokens_in, 0) AS tokens_in, COALESCE(r.tokens_out, 0) AS tokens_out,
           COALESCE(r.cached_in, 0) AS cached_in,
           COALESCE(r.usage_estimated, 0) AS usage_estimated, r.cost_usd, r.latency_ms,
           r.ttft_ms, COALESCE(r.queue_ms, 0) AS queue_ms, r.status_code, r.error_class,
           r.error_message, r.response_text, r.finished_at
    FROM tasks t LEFT JOIN results r ON r.run_id = t.run_id AND r.seq = t.seq;
    CREATE TABLE attempts (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        number INTEGER NOT NULL,
        model TEXT NOT NULL,
        gateway TEXT NOT NULL,
        key_fp TEXT,
        sent_at REAL NOT NULL,         -- unix seconds
        queue_ms REAL NOT NULL,
        latency_ms REAL,
        ttft_ms REAL,
        status_code INTEGER,
        error_class TEXT,
        error_message TEXT,
        retry_wait_s REAL,
        tokens_in INTEGER NOT NULL DEFAULT 0,
        tokens_out INTEGER NOT NULL DEFAULT 0,
        cached_in INTEGER NOT NULL DEFAULT 0,
        outcome TEXT NOT NULL,
        PRIMARY KEY (run_id, seq, number),
        FOREIGN KEY (run_id, seq) REFERENCES tasks(run_id, seq) ON DELETE CASCADE
    );
    """,
    # 1 -> 2: an audit/event log (run lifecycle, canary and key actions) and a control
    # queue through which another process (watch --write, canary CLI) steers a runner
    """
    CREATE TABLE events (
        id INTEGER PRIMARY KEY,
        run_id TEXT,
        at REAL NOT NULL,
        kind TEXT NOT NULL,
        actor TEXT,
        detail_json TEXT
    );
    CREATE INDEX events_by_run ON events(run_id, at);
    CREATE TABLE control (
        id INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL,
        at REAL NOT NULL,
        actor TEXT,
        command TEXT NOT NULL,
        arg TEXT,
        done_at REAL
    );
    CREATE INDEX control_pending ON control(run_id, done_at);
    """,
    # 2 -> 3: canary state (one row per baseline->candidate pair; survives restarts and is
    # shared by every process on this database), its audit log, and time indexes for the
    # per-stage / rolling-window analysis
    """
    CREATE TABLE canary (
        name TEXT PRIMARY KEY,         -- "baseline->candidate"
        baseline TEXT NOT NULL,
        candidate TEXT NOT NULL,
        status TEXT NOT NULL,          -- progressing | paused | aborted | complete
        pct INTEGER NOT NULL,          -- share of users on the candidate
        stage_started_at REAL NOT NULL,  -- the stage's analysis window starts here
        bake_started_at REAL NOT NULL,   -- the bake timer (restarted by resume)
        passing_since REAL,            -- all gates passing since (auto mode)
        failures INTEGER NOT NULL DEFAULT 0,  -- consecutive failed evaluations
        version INTEGER NOT NULL,      -- bumped on every change: compare-and-swap
        updated_at REAL NOT NULL
    );
    CREATE TABLE canary_actions (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        at REAL NOT NULL,
        action TEXT NOT NULL,
        actor TEXT NOT NULL,           -- OS user, or "auto"
        source TEXT NOT NULL,          -- cli | console | auto
        from_pct INTEGER, to_pct INTEGER,
        from_status TEXT, to_status TEXT,
        reason TEXT,
        metrics_json TEXT              -- the figures and verdicts it was taken on
    );
    CREATE INDEX canary_actions_by_name ON canary_actions(name, at);
    CREATE INDEX results_by_time ON results(finished_at);
    CREATE INDEX attempts_by_time ON attempts(sent_at);
    """,
    # 3 -> 4: each running run's keys as last seen (fingerprints only, never a key),
    # refreshed with the heartbeat: what `keys list` and `watch` show
    """
    CREATE TABLE key_state (
        run_id TEXT NOT NULL,
        gateway TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        label TEXT,
        source TEXT NOT NULL,
        state TEXT NOT NULL,           -- active | cooling | disabled | retired
        cooling_until REAL,            -- unix seconds
        reason TEXT,
        in_flight INTEGER NOT NULL,
        calls INTEGER NOT NULL,
        rate_limited INTEGER NOT NULL,
        errors INTEGER NOT NULL,
        tokens_in INTEGER NOT NULL,
        tokens_out INTEGER NOT NULL,
        last_used REAL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (run_id, gateway, fingerprint)
    );
    """,
    # 4 -> 5: run ownership and append-only attempts. A run is executed by the process that
    # holds its OS lock (lock_path) and the claim token in its row; every write of the
    # executor is fenced on that token. Attempts get their own id and are only ever inserted,
    # so a task sent twice shows twice (INSERT OR REPLACE used to hide it).
    """
    ALTER TABLE runs ADD COLUMN owner_token TEXT;     -- the claim; NULL once released
    ALTER TABLE runs ADD COLUMN owner_started REAL;   -- the owner's process start (pid reuse)
    ALTER TABLE runs ADD COLUMN lock_path TEXT;       -- its OS lock file (same host)
    CREATE TABLE attempts_v5 (
        id INTEGER PRIMARY KEY,
        uid TEXT NOT NULL UNIQUE,      -- claim token + counter: a journal replay is idempotent
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        number INTEGER NOT NULL,       -- not unique: two executors may both send number 1
        model TEXT NOT NULL,
        gateway TEXT NOT NULL,
        key_fp TEXT,
        sent_at REAL NOT NULL,
        queue_ms REAL NOT NULL,
        latency_ms REAL,
        ttft_ms REAL,
        status_code INTEGER,
        error_class TEXT,
        error_message TEXT,
        retry_wait_s REAL,
        tokens_in INTEGER NOT NULL DEFAULT 0,
        tokens_out INTEGER NOT NULL DEFAULT 0,
        cached_in INTEGER NOT NULL DEFAULT 0,
        outcome TEXT NOT NULL,
        FOREIGN KEY (run_id, seq) REFERENCES tasks(run_id, seq) ON DELETE CASCADE
    );
    INSERT INTO attempts_v5 (uid, run_id, seq, number, model, gateway, key_fp, sent_at,
        queue_ms, latency_ms, ttft_ms, status_code, error_class, error_message, retry_wait_s,
        tokens_in, tokens_out, cached_in, outcome)
    SELECT 'v4:' || run_id || ':' || seq || ':' || number, run_id, seq, number, model, gateway,
        key_fp, sent_at, queue_ms, latency_ms, ttft_ms, status_code, error_class,
        error_message, retry_wait_s, tokens_in, tokens_out, cached_in, outcome
    FROM attempts;
    DROP TABLE attempts;
    ALTER TABLE attempts_v5 RENAME TO attempts;
    CREATE INDEX attempts_by_task ON attempts(run_id, seq, number);
    CREATE INDEX attempts_by_time ON attempts(sent_at);
    """,
    # 5 -> 6: the executor's live figures (calls in flight, concurrency, paused), refreshed
    # with every heartbeat, so `watch` shows the real in-flight count, not 0
    """
    ALTER TABLE runs ADD COLUMN live_json TEXT;
    """,
    # 6 -> 7: the cost report's sums read from an index, not the table: finished_at sits
    # after response_text, so a table scan walks every answer's overflow pages (100,000
    # tasks: 0.21 s -> 0.08 s for the cost query)
    """
    CREATE INDEX results_cost ON results(run_id, state, model, gateway, bucket, key_fp,
        usage_estimated, finished_at, cost_usd, tokens_in, tokens_out, cached_in);
    """,
    # 7 -> 8: a run split into batches of seqs that worker processes lease (run --workers,
    # worker): a lease is a fencing token and an expiry the holder renews; a dead worker's
    # batches are leased again once expired. `workers` holds each one's heartbeat and live
    # figures (the run's own live_json belongs to a single executor).
    """
    CREATE TABLE batches (
        run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        batch INTEGER NOT NULL,
        first_seq INTEGER NOT NULL,
        last_seq INTEGER NOT NULL,     -- inclusive
        worker TEXT,                   -- host:pid of the last holder
        token TEXT,                    -- the holder's fencing token; a new lease changes it
        expires_at REAL,               -- unix seconds; renewed with every flush
        leases INTEGER NOT NULL DEFAULT 0,  -- how many times it was leased
        done_at REAL,                  -- every task of it has a stored result
        PRIMARY KEY (run_id, batch)
    );
    CREATE TABLE workers (
        run_id TEXT NOT NULL,
        worker TEXT NOT NULL,
        token TEXT NOT NULL,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        started_at REAL NOT NULL,
        heartbeat_at REAL NOT NULL,
        ended_at REAL,
        live_json TEXT,
        PRIMARY KEY (run_id, worker)
    );
    """,
    # 8 -> 9: a budget cap shared by a run's workers (store/budget_ledger.py): what each
    # worker drew from the cap, and what its stored results cost (written with them)
    """
    ALTER TABLE workers ADD COLUMN granted_usd REAL NOT NULL DEFAULT 0;
    ALTER TABLE workers ADD COLUMN spent_usd REAL NOT NULL DEFAULT 0;
    """,
    # 9 -> 10: a key's state per process of the run: each worker stores its own row (they
    # overwrote each other's counters), readers add them up (store/reads.py). '' is a
    # single executor's row.
    """
    CREATE TABLE key_state_w (
        run_id TEXT NOT NULL,
        gateway TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        worker TEXT NOT NULL DEFAULT '',
        label TEXT,
        source TEXT NOT NULL,
        state TEXT NOT NULL,
        cooling_until REAL,
        reason TEXT,
        in_flight INTEGER NOT NULL,
        calls INTEGER NOT NULL,
        rate_limited INTEGER NOT NULL,
        errors INTEGER NOT NULL,
        tokens_in INTEGER NOT NULL,
        tokens_out INTEGER NOT NULL,
        last_used REAL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (run_id, gateway, fingerprint, worker)
    );
    INSERT INTO key_state_w (run_id, gateway, fingerprint, label, source, state,
        cooling_until, reason, in_flight, calls, rate_limited, errors, tokens_in, tokens_out,
        last_used, updated_at)
    SELECT run_id, gateway, fingerprint, label, source, state, cooling_until, reason,
        in_flight, calls, rate_limited, errors, tokens_in, tokens_out, last_used, updated_at
    FROM key_state ORDER BY rowid;
    DROP TABLE key_state;
    ALTER TABLE key_state_w RENAME TO key_state;
    """,
    # 10 -> 11: secrets out of stored configs — webhook URLs as a tag, base_url and the OTLP
    # endpoint without user:password@ (a data step: store/scrub.py; the reader role could
    # select them)
    """
    CREATE INDEX IF NOT EXISTS runs_by_start ON runs(started_at);
    """,
    # 11 -> 12: on PostgreSQL the control queue, the canary and its audit log are written
    # through SECURITY DEFINER functions that name the caller's session_user
    # (store/audited.py); the roles may no longer write those tables directly
    """
    CREATE INDEX IF NOT EXISTS canary_actions_by_at ON canary_actions(at);
    """,
    # 12 -> 13: each key's state changes (cooling, disabled, retired, active again) as the
    # writer saw them, append-only: a replay shows the keys panel as it was at a moment
    # (key_state keeps only the latest; the counters come from the attempts)
    """
    CREATE TABLE key_changes (
        run_id TEXT NOT NULL,
        at REAL NOT NULL,
        gateway TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        worker TEXT NOT NULL DEFAULT '',
        label TEXT,
        source TEXT NOT NULL,
        state TEXT NOT NULL,
        cooling_until REAL,
        reason TEXT
    );
    CREATE INDEX key_changes_by_run ON key_changes(run_id, at);
    """,
    # 13 -> 14: the grid's columns of every task, read without the prompts: a replay or a
    # watcher opening a 100,000-task run read 1 GB of workload lines to list them (250 ms)
    """
    CREATE INDEX IF NOT EXISTS tasks_grid ON tasks(run_id, seq, task_id, model, bucket);
    """,
    # 14 -> 15: a finished run's replay timeline, whole (store/replay_index.py): opening a
    # moment of a 100,000-task run read every result and call again (1.2-1.8 s)
    """
    CREATE TABLE replay_index (
        run_id TEXT PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
        finished_at REAL NOT NULL,     -- the run's end it was built for
        results INTEGER NOT NULL,      -- and its rows then: a resume adds some
        attempts INTEGER NOT NULL,
        events INTEGER NOT NULL,
        built_at REAL NOT NULL,
        data BLOB NOT NULL             -- replay/timeline.py's layout (a format inside)
    );
    """,
    # 15 -> 16: a finished run's cost breakdown, whole (store/cost_index.py): its GROUP BY
    # sorts every succeeded task (150 ms of `report` and `cost` of a 100,000-task run)
    """
    CREATE TABLE cost_index (
        run_id TEXT PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
        finished_at REAL NOT NULL,     -- the run's end it was summed for
        results INTEGER NOT NULL,      -- and its results then: a resume adds some
        wall_ms REAL NOT NULL,         -- the timeline's span and its steps
        steps INTEGER NOT NULL,
        built_at REAL NOT NULL,
        data TEXT NOT NULL             -- store/cost_rows.py's groups (core/plain.py's JSON)
    );
    """,
    # 16 -> 17: what the engine did after a failed call when its class and status do not
    # say it ("… on KEY: other key", a fallback): the replayed log line as it was written
    """
    ALTER TABLE attempts ADD COLUMN retry_detail TEXT;
    """,
]
# Python steps run with a migration, in its transaction (what SQL alone cannot rewrite)
DATA_STEPS = {11: "scrub_configs", 12: "audit_functions"}

SCHEMA_VERSION = len(MIGRATIONS)

"""The on-call toolbox around a run: Prometheus metrics, webhook alerts, OpenTelemetry
traces. Above the engine and the canary (it reads their state), below run/ (which
attaches it to a run)."""

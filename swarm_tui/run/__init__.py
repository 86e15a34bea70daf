"""Running one swarm end to end: the simulator and clients (wiring), the stored run
(stored_run: engine + writer + canary + key watchers), the headless progress line."""

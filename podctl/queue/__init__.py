"""Queued runs for cron: `podctl queue add` stores a run, `podctl queue tick` moves
every entry one step through its state machine (see tick.py), and the world (the
Cloud TPU API, GCS) is the truth each tick reconciles against."""

"""The fake's own controls: the admin API and its client, faults, the daemon."""

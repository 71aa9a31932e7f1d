"""The job layer: bundle -> GCS, SSH fan-out to every host, host agent, log streaming."""

"""The fake's Google APIs: Cloud TPU v2 and Compute Engine on one HTTP server, their errors and rules."""

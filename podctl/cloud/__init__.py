"""The Cloud TPU API: provisioning as lifecycle steps (create, wait, describe, terminate),
the wire translated to podctl's dataclasses (types.py) where it enters."""

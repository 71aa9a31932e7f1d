"""The ways a run reaches its hosts (channels), chosen once by name from a registry."""

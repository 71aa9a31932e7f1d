"""The fake's GCS: the emulator behind a front door with tokens, scopes and real GCS's rules."""

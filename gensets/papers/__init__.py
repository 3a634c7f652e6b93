"""One folder per paper: its builder(s), report(s), paper-only statistics and ``gensets reproduce`` tables."""

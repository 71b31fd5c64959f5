"""The standalone compile harness: runs the probes, builds the verdict, and its CLI."""

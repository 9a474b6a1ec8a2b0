"""The package version (one place, read by the runtime's cache key and the command line)."""
__version__ = "0.1.0"

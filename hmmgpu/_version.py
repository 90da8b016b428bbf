"""The package version, in one place (the CLI and reports read it here, not from the package face)."""
__version__ = "0.1.0"

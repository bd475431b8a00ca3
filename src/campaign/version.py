"""The package version, importable alone (results stamp it without pulling in the rest of the package)."""
__version__ = "0.1.0"

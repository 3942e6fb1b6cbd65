"""The package version, in a module of its own so internal modules can name it without importing the
package's public surface (whose type-checking imports reach every module)."""

__all__ = ["__version__"]

__version__ = "0.1.0"

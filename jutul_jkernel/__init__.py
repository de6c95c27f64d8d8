"""A supervised Julia kernel for Jupyter, and the supervisor it stands on."""

__version__ = "0.1.0"

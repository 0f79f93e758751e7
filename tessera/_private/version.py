"""The version of tessera: part of every cache key, so a new release never trusts an old
record it might read differently."""

__version__ = "0.1.0"

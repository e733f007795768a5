"""One exception tree for prepkit.

Every error prepkit raises on purpose derives from :class:`PrepkitError`, so callers
can catch one type. Messages name the file or sample involved and follow one style,
zarr-python's: "<where>: Expected X. Got Y."
"""

from __future__ import annotations


class PrepkitError(Exception):
    """Base class of every error prepkit raises on purpose."""


class CodecError(PrepkitError, ValueError):
    """A stored or encoded byte stream is malformed, truncated or hostile."""


class StoreError(PrepkitError):
    """A store is missing, incomplete, locked, or does not follow the format."""


class StoreCorruptError(StoreError):
    """A store's bytes do not match their recorded checksums or index."""


class IngestError(PrepkitError):
    """A source image could not be read or normalized (names the file)."""


class DecodeError(PrepkitError):
    """A stored sample could not be decoded (names the sample index)."""


class PipelineError(PrepkitError, ValueError):
    """An augmentation pipeline is impossible (bad op order, bad parameters)."""

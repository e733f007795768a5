"""Where a store lives: a local folder, or a prefix in object storage reached through obstore.

A store location is either a filesystem path or a URL (``s3://bucket/prefix``, ``gs://``,
``az://``; ``http(s)://`` read-only). Object storage goes through one client, obstore.
Credentials and the endpoint come from the usual environment variables (``AWS_*``,
``GOOGLE_*``, ``AZURE_*``) and from ``storage_options``, a dict of obstore configuration
keys (``endpoint``, ``access_key_id``, ``secret_access_key``, ``region``, ...) and client
keys (``allow_http``, ``timeout``, ...). On the command line: ``--storage-option KEY=VALUE``.

:class:`ObjectRoot` is the small set of operations prepkit needs on a prefix: whole-object
puts (multipart for large ones), ranged gets, head, list and delete. Every failure becomes
a :class:`~prepkit.errors.StoreError` naming the object's URL. Transient failures
(connection refused, 5xx) are retried by the client with exponential backoff, so a server
that restarts within the retry budget is invisible to the caller.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from prepkit.errors import StoreError

SCHEMES = ("s3://", "s3a://", "gs://", "az://", "abfs://", "abfss://", "http://", "https://")
READ_ONLY_SCHEMES = ("http://", "https://")
# obstore's HTTP client options; every other key is the store's own configuration.
CLIENT_KEYS = frozenset({
    "allow_http", "allow_invalid_certificates", "connect_timeout", "default_content_type",
    "pool_idle_timeout", "pool_max_idle_per_host", "proxy_url", "proxy_ca_certificate",
    "proxy_excludes", "root_certificate", "randomize_addresses", "read_timeout", "timeout", "user_agent",
})
# Retried on connection errors and 5xx: about a minute of patience with backoff up to 4 s.
RETRY_TIMEOUT_S = 60.0
MULTIPART_CHUNK = 8 << 20


def is_url(location: str | os.PathLike[str]) -> bool:
    """True if ``location`` names object storage rather than a local path."""
    return isinstance(location, str) and location.lower().startswith(SCHEMES)


def parse_storage_options(pairs: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``["KEY=VALUE", ...]`` from the command line into a dict (clear error otherwise)."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise StoreError(f"Expected --storage-option KEY=VALUE. Got {pair!r}.")
        options[key.strip().lower()] = value
    return options


class ObjectPath:
    """A URL inside object storage, joined with ``/`` like a :class:`~pathlib.Path`.

    Only naming: it is what error messages and ``shard_path`` return for remote stores.
    """

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def __truediv__(self, part: str | os.PathLike[str]) -> ObjectPath:
        return ObjectPath(f"{self.url}/{os.fspath(part)}")

    @property
    def name(self) -> str:
        return self.url.rsplit("/", 1)[-1]

    def resolve(self) -> ObjectPath:
        return self

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"ObjectPath({self.url!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectPath) and other.url == self.url

    def __hash__(self) -> int:
        return hash(self.url)


def _as_bool(value: Any) -> Any:
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
        return value.lower() in ("true", "1", "yes")
    return value


class ObjectRoot:
    """The objects under one URL prefix; keys are relative to it (``"zarr.json"``)."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        from obstore.store import from_url

        if not is_url(url):
            raise StoreError(f"Expected an object storage URL ({', '.join(SCHEMES)}). Got {url!r}.")
        self.url = url.rstrip("/")
        self.read_only = url.lower().startswith(READ_ONLY_SCHEMES)
        options = {str(k).lower(): v for k, v in (storage_options or {}).items()}
        client = {k: _as_bool(v) for k, v in options.items() if k in CLIENT_KEYS}
        config = {k: _as_bool(v) for k, v in options.items() if k not in CLIENT_KEYS}
        endpoint = str(config.get("endpoint") or config.get("aws_endpoint") or os.environ.get("AWS_ENDPOINT_URL", ""))
        if endpoint.startswith("http://") and "allow_http" not in client:
            client["allow_http"] = True  # an explicit http:// endpoint (a local server) is meant
        if self.url.startswith(("s3://", "s3a://")) and endpoint and "virtual_hosted_style_request" not in config:
            config["virtual_hosted_style_request"] = False  # custom endpoints: path-style requests
        retry = {
            "max_retries": 1000,  # the time budget below is the limit
            "retry_timeout": timedelta(seconds=RETRY_TIMEOUT_S),
            "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=4), "base": 2},
        }
        try:
            self.client: Any = from_url(self.url, config=config or None, client_options=client or None,  # type: ignore[call-overload]
                                        retry_config=retry)
        except Exception as error:  # obstore raises its own types for bad URLs and keys
            raise StoreError(f"{self.url}: cannot open object storage ({_first_line(error)})") from None

    # -- naming ---------------------------------------------------------------------
    def path(self, key: str = "") -> ObjectPath:
        return ObjectPath(f"{self.url}/{key}" if key else self.url)

    def _fail(self, key: str, action: str, error: Exception) -> StoreError:
        from obstore.exceptions import NotFoundError, PermissionDeniedError, UnauthenticatedError

        where = f"{self.url}/{key}" if key else self.url
        if isinstance(error, NotFoundError | FileNotFoundError):
            return StoreError(f"{where}: object does not exist")
        text = _first_line(error)
        if isinstance(error, PermissionDeniedError | UnauthenticatedError | PermissionError) or any(
            word in text for word in ("403", "401", "SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied")
        ):
            return StoreError(
                f"{where}: access denied while trying to {action}. Expected valid credentials "
                f"(AWS_* variables or --storage-option access_key_id=/secret_access_key=). Got: {text}"
            )
        return StoreError(f"{where}: cannot {action} ({text})")

    # -- reads ----------------------------------------------------------------------
    def get(self, key: str) -> bytes:
        """The whole object ``key``."""
        import obstore

        try:
            return bytes(obstore.get(self.client, key).bytes())
        except Exception as error:
            raise self._fail(key, "read", error) from None

    def get_range(self, key: str, start: int, stop: int) -> bytes:
        """Bytes [start, stop) of object ``key`` (one ranged GET)."""
        import obstore

        if stop <= start:
            return b""
        try:
            data = bytes(obstore.get_range(self.client, key, start=start, end=stop))
        except Exception as error:
            raise self._fail(key, f"read bytes [{start}, {stop})", error) from None
        if len(data) != stop - start:
            raise StoreError(f"{self.url}/{key}: expected {stop - start} bytes at [{start}, {stop}). Got {len(data)}.")
        return data

    def get_ranges(self, key: str, starts: list[int], stops: list[int]) -> list[bytes]:
        """Several ranges of one object, fetched concurrently and merged by the client."""
        import obstore

        if not starts:
            return []
        try:
            parts = obstore.get_ranges(self.client, key, starts=starts, ends=stops)
        except Exception as error:
            raise self._fail(key, f"read {len(starts)} byte ranges", error) from None
        return [bytes(p) for p in parts]

    def size(self, key: str) -> int:
        """Size in bytes of object ``key``."""
        import obstore

        try:
            return int(obstore.head(self.client, key)["size"])
        except Exception as error:
            raise self._fail(key, "look up", error) from None

    def exists(self, key: str) -> bool:
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            obstore.head(self.client, key)
            return True
        except (NotFoundError, FileNotFoundError):
            return False
        except Exception as error:
            raise self._fail(key, "look up", error) from None

    def listing(self, prefix: str = "") -> dict[str, int]:
        """Every object under ``prefix``: key (relative to the root) -> size."""
        import obstore

        found: dict[str, int] = {}
        try:
            for batch in obstore.list(self.client, prefix or None):
                for meta in batch:
                    found[str(meta["path"])] = int(meta["size"])
        except Exception as error:
            raise self._fail(prefix, "list objects", error) from None
        return found

    # -- writes ---------------------------------------------------------------------
    def _writable(self, key: str) -> None:
        if self.read_only:
            raise StoreError(f"{self.url}/{key}: http(s) stores are read-only. Expected s3://, gs:// or az:// to write.")

    def put(self, key: str, data: bytes | Path) -> None:
        """Write object ``key`` whole (from bytes or a local file; multipart above 8 MiB)."""
        import obstore

        self._writable(key)
        try:
            obstore.put(self.client, key, data, chunk_size=MULTIPART_CHUNK)
        except Exception as error:
            raise self._fail(key, "write", error) from None

    def delete(self, keys: list[str]) -> None:
        import obstore

        if not keys:
            return
        self._writable(keys[0])
        try:
            obstore.delete(self.client, keys)
        except Exception as error:
            raise self._fail(keys[0], f"delete {len(keys)} objects", error) from None

    def zarr_store(self, *, read_only: bool = True) -> Any:
        """The same prefix as a zarr-python store (``zarr.storage.ObjectStore``)."""
        from zarr.storage import ObjectStore

        return ObjectStore(self.client, read_only=read_only)


def _first_line(error: Exception) -> str:
    """obstore messages carry a long debug dump after the first lines: keep the gist."""
    text = str(error).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    head = " ".join(lines[:2]) if lines else type(error).__name__
    return head[:400]


def iter_local_files(root: Path) -> Iterator[tuple[str, Path]]:
    """Every file under ``root`` as (key with ``/`` separators, path), sorted."""
    for folder, _, names in sorted(os.walk(root)):
        for name in sorted(names):
            path = Path(folder) / name
            yield path.relative_to(root).as_posix(), path

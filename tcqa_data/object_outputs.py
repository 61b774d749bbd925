"""Committed output in object storage: the second backend of ``outputs.py``'s one notion of a
committed output (``outputs.commit_dir`` renames a staged folder into place; a bucket has no
rename).

An output prefix ``OUT`` (``s3://bucket/purified``) is committed by one object written last,
``OUT/_tcqa_commit.json``, naming every output object (its path below ``OUT``, size, sha256 and
kind: ``shard`` for the output's data, ``report`` for the run's log and reports),
as Delta Lake's log and Spark's ``_SUCCESS`` commit a table. A single PUT is atomic: the object
is there whole or not at all. Readers trust only the objects the commit names (``committed``);
any other object under ``OUT`` (a killed run's shard, a leftover) is never read as output.
A run's bookkeeping lives under ``OUT/_tcqa_work/`` (its record and per-shard done-records) until
the commit, then is deleted.

Credentials and endpoints come from the filesystem's own chain (fsspec: s3fs, gcsfs, adlfs);
nothing here reads or writes one.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

from tcqa_data.errors import ConfigError, TcqaError

COMMIT = "_tcqa_commit.json"
WORK = "_tcqa_work"
COMMIT_VERSION = 1


def object_url(path: object) -> str | None:
    """``path`` as an object-storage URL (``scheme://...`` other than ``file://``), else None."""
    text = str(path)
    scheme, sep, _ = text.partition("://")
    if sep and scheme not in ("", "file") and scheme.replace("+", "").isalnum():
        return text.rstrip("/")
    return None


def _etag(info: dict[str, Any]) -> str | None:
    for key in ("ETag", "etag", "md5Hash", "content_md5"):
        if info.get(key):
            return str(info[key]).strip('"')
    return None


class ObjectFolder:
    """An output prefix in object storage: objects put whole, read back, listed, committed."""

    def __init__(self, url: str) -> None:
        from fsspec.core import url_to_fs

        self.url = url.rstrip("/")
        try:
            self.fs, self.root = url_to_fs(self.url)
        except ImportError as e:
            raise TcqaError(f"{self.url}: writing there needs {e.name}: "
                            "pip install 'tcqa-data[cloud]'") from None
        self.root = self.root.rstrip("/")

    def _key(self, rel: str) -> str:
        parts = rel.split("/")
        if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise ConfigError(f"{rel!r}: not a path below the output {self.url}")
        return f"{self.root}/{rel}"

    def url_of(self, rel: str) -> str:
        return f"{self.url}/{rel}"

    def _error(self, rel: str, e: BaseException) -> TcqaError:
        what = ("access denied" if isinstance(e, PermissionError) else f"{type(e).__name__}: "
                f"{(str(e).strip().splitlines() or [''])[0][:300]}")
        return TcqaError(f"{self.url_of(rel)}: cannot write or read it: {what}")

    def read_bytes(self, rel: str) -> bytes | None:
        """The object's bytes, None if there is none."""
        try:
            return self.fs.cat_file(self._key(rel))
        except FileNotFoundError:
            return None
        except Exception as e:
            raise self._error(rel, e) from None

    def read_json(self, rel: str) -> Any:
        data = self.read_bytes(rel)
        if data is None:
            return None
        try:
            return json.loads(data)
        except ValueError:
            return None

    def write_bytes(self, rel: str, data: bytes) -> None:
        """One PUT: the object is there whole or not at all."""
        try:
            self.fs.pipe_file(self._key(rel), data)
        except Exception as e:
            raise self._error(rel, e) from None

    def write_json(self, rel: str, value: Any) -> None:
        self.write_bytes(rel, json.dumps(value, indent=1, sort_keys=True).encode() + b"\n")

    def put_file(self, rel: str, local: str) -> dict[str, Any]:
        """Upload a local file as ``rel`` (multipart for large ones: invisible until complete);
        returns its size and etag as the store reports them."""
        try:
            self.fs.put_file(local, self._key(rel))
        except Exception as e:
            raise self._error(rel, e) from None
        info = self.info(rel)
        assert info is not None
        return info

    def info(self, rel: str) -> dict[str, Any] | None:
        """``{"size", "etag"}`` of the object, None if there is none."""
        try:
            self.fs.invalidate_cache(self._key(rel))
            info = self.fs.info(self._key(rel))
        except FileNotFoundError:
            return None
        except Exception as e:
            raise self._error(rel, e) from None
        if info.get("type") == "directory":
            return None
        return {"size": int(info.get("size") or 0), "etag": _etag(info)}

    def list(self) -> list[str]:
        """Every object below the prefix, as paths relative to it."""
        try:
            self.fs.invalidate_cache()
            if not self.fs.exists(self.root):
                return []
            return sorted(posixpath.relpath(k, self.root) for k in self.fs.find(self.root))
        except Exception as e:
            raise self._error("", e) from None

    def remove(self, rels: list[str]) -> None:
        if rels:
            try:
                self.fs.rm([self._key(r) for r in rels])
            except FileNotFoundError:
                pass
            except Exception as e:
                raise self._error(rels[0], e) from None

    def committed(self) -> dict[str, Any] | None:
        """The commit manifest, None when the prefix holds no committed output."""
        record = self.read_json(COMMIT)
        return record if isinstance(record, dict) and record.get("version") == COMMIT_VERSION else None

    def check_ours(self, command: str) -> None:
        """Refuse a prefix holding objects this tool did not write (a command never replaces a
        folder it did not write): it must be empty, committed, or a killed run's work."""
        names = self.list()
        if names and COMMIT not in names and not any(n.startswith(WORK + "/") for n in names):
            raise ConfigError(f"--out {self.url} holds {len(names)} object(s) {command} did not write "
                              f"(e.g. {names[0]}); choose an empty prefix")

    def commit(self, objects: dict[str, dict[str, Any]], run: dict[str, Any]) -> None:
        """Write the commit manifest, last: ``objects`` (rel -> size, sha256) become the output."""
        self.write_json(COMMIT, {"version": COMMIT_VERSION, "run": run,
                                 "objects": dict(sorted(objects.items()))})

    def uncommit(self) -> None:
        """Withdraw an earlier commit before objects it names are written again."""
        self.remove([COMMIT] if self.info(COMMIT) is not None else [])


def committed_objects(url: str) -> dict[str, dict[str, Any]] | None:
    """The objects (rel -> size, sha256, kind) a committed output at ``url`` names, None if ``url``
    holds no commit manifest; ``TcqaError`` for an unfinished output (work but no commit)."""
    folder = ObjectFolder(url)
    record = folder.committed()
    if record is not None:
        return dict(record["objects"])
    if folder.info(f"{WORK}/run.json") is not None:
        raise TcqaError(f"{url}: an unfinished output (a run's work, no {COMMIT}): its objects are "
                        "not output until a run commits them; rerun the command that writes it")
    return None

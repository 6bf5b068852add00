"""Where archives are written: a directory (a mounted volume) or an S3-compatible object store.

Both keep the same layout (`jobttl.core.domain.decisions.archive`) under their root, write ``index.json`` last
(so a folder with one is complete), and raise `ArchiveStoreError` naming the store for any
failure. The S3 store uses boto3 with its own configuration chain: credentials and region
from the environment (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, a web identity token,
an instance profile...), and another endpoint (MinIO, Ceph, a test server) from
``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``, as every AWS SDK reads them. boto3 is
imported only when an S3 store is opened, so processes that never archive never load it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from jobttl.core.domain.decisions.archive import INDEX, Stored, read_index, split_folder
from jobttl.core.domain.kinds.registry import group_of, kind_named, split_group_kind
from jobttl.core.domain.rules.policy import ArchiveStore


class ArchiveStoreError(Exception):
    """The store could not be read or written; the message names the store and the problem."""


class Backend(Protocol):
    """Where archives are kept (a directory, an S3 bucket): what the worker and `jobttl logs` need of it."""

    url: str

    def location(self, folder: str) -> str: ...

    def write(self, folder: str, files: dict[str, bytes]) -> int: ...

    def read(self, folder: str, path: str) -> bytes | None: ...

    def folders(self, namespace: str, name: str) -> list[str]: ...

    def stored(self) -> Iterator[Stored]: ...

    def remove(self, folder: str) -> None: ...


def open_store(spec: ArchiveStore) -> Backend:
    """The store a policy's ``archive.store`` names."""
    if spec.url.startswith("s3://"):
        bucket, _, prefix = spec.url[len("s3://") :].partition("/")
        return S3Store(bucket, prefix)
    return DirectoryStore(spec.url[len("file://") :] if spec.url.startswith("file://") else spec.url)


def _ordered(files: dict[str, bytes]) -> list[tuple[str, bytes]]:
    """index.json last: a reader that finds it finds everything it lists."""
    return sorted(files.items(), key=lambda item: item[0] == INDEX)


class DirectoryStore:
    def __init__(self, root: str):
        self.root = Path(root)
        self.url = str(self.root)

    def location(self, folder: str) -> str:
        return f"{self.root}/{folder}"

    def write(self, folder: str, files: dict[str, bytes]) -> int:
        written = 0
        try:
            for path, body in _ordered(files):
                target = self.root / folder / path
                target.parent.mkdir(parents=True, exist_ok=True)
                # Whole files only: write aside, then rename over (atomic on one filesystem).
                fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
                with os.fdopen(fd, "wb") as out:
                    out.write(body)
                os.replace(temporary, target)
                written += len(body)
        except OSError as exc:
            raise ArchiveStoreError(f"cannot write to the archive directory {self.root}: {exc}") from exc
        return written

    def read(self, folder: str, path: str) -> bytes | None:
        try:
            return (self.root / folder / path).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ArchiveStoreError(f"cannot read {folder}{path} in {self.root}: {exc}") from exc

    def folders(self, namespace: str, name: str) -> list[str]:
        base = self.root / namespace
        if not base.is_dir():
            return []
        found = []
        for kind in sorted(p for p in base.iterdir() if p.is_dir()):
            for job in sorted(kind.glob(f"{name}-*")):
                parts = split_folder(job.name)
                if parts and parts[0] == name and (job / INDEX).exists():
                    found.append(f"{namespace}/{kind.name}/{job.name}/")
        return found

    def stored(self) -> Iterator[Stored]:
        if not self.root.is_dir():
            return
        for index in self.root.glob(f"*/*/*/{INDEX}"):
            job = index.parent
            try:
                size = sum(f.stat().st_size for f in job.rglob("*") if f.is_file())
                document = read_index(index.read_bytes()) or {}
                at = float(document.get("archivedAt") or index.stat().st_mtime)
            except (OSError, ValueError, TypeError):
                continue
            yield Stored(f"{job.relative_to(self.root).as_posix()}/", at, size)

    def remove(self, folder: str) -> None:
        try:
            shutil.rmtree(self.root / folder)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise ArchiveStoreError(f"cannot remove {folder} from {self.root}: {exc}") from exc


class S3Store:
    def __init__(self, bucket: str, prefix: str = ""):
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.url = f"s3://{bucket}/{self.prefix}"
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            import boto3
            from botocore.config import Config

            self._client = boto3.client(
                "s3", config=Config(connect_timeout=5, read_timeout=30, retries={"mode": "standard", "max_attempts": 3})
            )
        return self._client

    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                raise FileNotFoundError(str(exc)) from exc
            raise ArchiveStoreError(f"cannot {doing} {self.url}: {exc}") from exc
        except BotoCoreError as exc:
            raise ArchiveStoreError(f"cannot {doing} {self.url}: {exc}") from exc

    def location(self, folder: str) -> str:
        return f"{self.url}{folder}"

    def write(self, folder: str, files: dict[str, bytes]) -> int:
        written = 0
        with self._errors("write to"):
            for path, body in _ordered(files):
                content = "application/json" if path.endswith(".json") else "text/plain; charset=utf-8"
                self.client.put_object(
                    Bucket=self.bucket, Key=f"{self.prefix}{folder}{path}", Body=body, ContentType=content
                )
                written += len(body)
        return written

    def read(self, folder: str, path: str) -> bytes | None:
        try:
            with self._errors("read from"):
                return self.client.get_object(Bucket=self.bucket, Key=f"{self.prefix}{folder}{path}")["Body"].read()
        except FileNotFoundError:
            return None

    def _prefixes(self, prefix: str) -> list[str]:
        found = []
        with self._errors("list"):
            for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix, Delimiter="/"
            ):
                found += [p["Prefix"] for p in page.get("CommonPrefixes") or []]
        return found

    def folders(self, namespace: str, name: str) -> list[str]:
        found = []
        for kind in self._prefixes(f"{self.prefix}{namespace}/"):
            for job in self._prefixes(f"{kind}{name}-"):
                parts = split_folder(job.rstrip("/").rsplit("/", 1)[-1])
                if parts and parts[0] == name:
                    found.append(job[len(self.prefix) :])
        return found

    def stored(self) -> Iterator[Stored]:
        sizes: dict[str, int] = {}
        archived: dict[str, float] = {}
        with self._errors("list"):
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix):
                for item in page.get("Contents") or []:
                    relative = item["Key"][len(self.prefix) :]
                    parts = relative.split("/")
                    if len(parts) < 4:
                        continue
                    job = "/".join(parts[:3]) + "/"
                    sizes[job] = sizes.get(job, 0) + int(item["Size"])
                    if relative == f"{job}{INDEX}":
                        archived[job] = item["LastModified"].timestamp()
        for job, at in archived.items():
            yield Stored(job, at, sizes.get(job, 0))

    def remove(self, folder: str) -> None:
        with self._errors("remove from"):
            keys = [
                {"Key": item["Key"]}
                for page in self.client.get_paginator("list_objects_v2").paginate(
                    Bucket=self.bucket, Prefix=f"{self.prefix}{folder}"
                )
                for item in page.get("Contents") or []
            ]
            for start in range(0, len(keys), 1000):
                self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": keys[start : start + 1000], "Quiet": True}
                )


def latest(store: Backend, namespace: str, name: str, kind: str | None = None) -> tuple[str, dict[str, Any]] | None:
    """The newest complete archive of a job name (of `kind`, if given, as `--kind` names kinds: ``Job``
    is batch/v1's, Volcano's ``Job.batch.volcano.sh``): its folder and index. Folders are by bare
    Kind (both Jobs share ``<namespace>/Job/``, told apart by UID); the index has the apiVersion."""
    found = []
    for where in store.folders(namespace, name):
        if kind is not None and where.split("/")[1] != split_group_kind(kind.rpartition("/")[2])[0]:
            continue
        document = read_index(store.read(where, INDEX))
        if document is None:
            continue
        api_version = document.get("apiVersion")
        if kind is not None and not kind_named(
            kind, group_of(api_version) if isinstance(api_version, str) else None, where.split("/")[1]
        ):
            continue
        found.append((float(document.get("archivedAt") or 0), where, document))
    if not found:
        return None
    _, where, document = max(found, key=lambda f: (f[0], f[1]))
    return where, document

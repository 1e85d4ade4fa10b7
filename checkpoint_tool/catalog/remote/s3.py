"""S3 and S3-compatible object stores as a ``Store`` (s3fs / aiobotocore, optional extra).

``s3://bucket/prefix`` lists every object under the prefix once (size and ETag, pinned);
tensor bytes come from ``GetObject`` with ``Range`` and ``IfMatch: <listed ETag>``, so an object
overwritten mid-run answers 412 and ckpt stops instead of mixing versions. Credentials,
region and endpoint come from botocore's usual places (``AWS_PROFILE``, ``AWS_ACCESS_KEY_ID``,
``AWS_ENDPOINT_URL_S3`` for MinIO / Ceph / the tests' moto server, ...); botocore's own retries
are off: ``retry.with_retries`` retries (one policy for hub and S3, one line at the end).

Example::

    store = S3Store.open("models", "deepseek/R1")
    store.source, store.revision   # ('s3://models/deepseek/R1', 'etags-sha256:3f5a...')
"""

from __future__ import annotations

import hashlib
from typing import Any

from checkpoint_tool.catalog.remote.retry import Transient, timeout_s, with_retries
from checkpoint_tool.catalog.remote.store import RemoteFile, Store
from checkpoint_tool.errors import InputError

#: botocore error codes worth another attempt
TRANSIENT_CODES = {"SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout", "503"}


def _filesystem() -> Any:
    try:
        import s3fs
    except ImportError as exc:
        raise InputError(
            "s3:// sources need the remote extra: pip install 'checkpoint-tool[remote]'"
        ) from exc
    t = timeout_s()
    return s3fs.S3FileSystem(
        config_kwargs={
            "retries": {"max_attempts": 1, "mode": "standard"},
            "connect_timeout": t,
            "read_timeout": t,
        },
        skip_instance_cache=True,
    )


class S3Store(Store):
    """The objects under one key prefix of one bucket."""

    def __init__(self, fs: Any, bucket: str, prefix: str, files: dict[str, RemoteFile]) -> None:
        super().__init__(files)
        self.fs, self.bucket, self.prefix = fs, bucket, prefix
        self.source = f"s3://{bucket}/{prefix}".rstrip("/")
        lines = "".join(f"{f.name}\t{f.size}\t{f.etag}\n" for _, f in sorted(files.items()))
        self.revision = "etags-sha256:" + hashlib.sha256(lines.encode()).hexdigest()[:16]

    @classmethod
    def open(cls, bucket: str, prefix: str) -> S3Store:
        fs = _filesystem()
        prefix = prefix.strip("/")
        where = f"s3://{bucket}/{prefix}"
        listing = with_retries(lambda: _run(fs, _list(fs, bucket, prefix), where), where)
        if not listing:
            raise InputError(f"{where}: no objects under this prefix; check the bucket and path")
        return cls(fs, bucket, prefix, listing)

    def key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def _fetch(self, rel: str, offset: int, view: memoryview) -> None:
        n = len(view)
        where = self.where(rel)
        data = _run(self.fs, self._get(rel, offset, n), where)
        view[: len(data)] = data
        if len(data) < n:
            raise Transient(f"short body ({len(data)} of {n} bytes)")

    async def _get(self, rel: str, offset: int, n: int) -> bytes:
        client = await self.fs.set_session()
        resp = await client.get_object(
            Bucket=self.bucket,
            Key=self.key(rel),
            Range=f"bytes={offset}-{offset + n - 1}",
            IfMatch=f'"{self.files[rel].etag}"',
        )
        body = resp["Body"]
        try:
            data = await body.read()
        finally:
            body.close()
        self.count(len(data))
        if len(data) > n:
            raise InputError(f"{self.where(rel)}: the server sent more than the {n} bytes asked")
        return data

    def _stat_now(self, rel: str) -> RemoteFile:
        async def head() -> RemoteFile:
            client = await self.fs.set_session()
            r = await client.head_object(Bucket=self.bucket, Key=self.key(rel))
            return RemoteFile(rel, int(r["ContentLength"]), str(r["ETag"]).strip('"'))

        return _run(self.fs, head(), self.where(rel))

    def download(self, rel: str, dest: Any) -> None:
        """A small object into ``dest`` (a local path), atomically."""
        data = self.read(rel, 0, self.files[rel].size)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".ckpt-partial")
        tmp.write_bytes(data)
        tmp.replace(dest)


async def _list(fs: Any, bucket: str, prefix: str) -> dict[str, RemoteFile]:
    client = await fs.set_session()
    out: dict[str, RemoteFile] = {}
    token: str | None = None
    base = f"{prefix}/" if prefix else ""
    while True:
        kw: dict[str, Any] = {"Bucket": bucket, "Prefix": base}
        if token:
            kw["ContinuationToken"] = token
        page = await client.list_objects_v2(**kw)
        for obj in page.get("Contents", []):
            rel = obj["Key"][len(base) :]
            if rel and not rel.endswith("/"):
                out[rel] = RemoteFile(rel, int(obj["Size"]), str(obj["ETag"]).strip('"'))
        if not page.get("IsTruncated"):
            return out
        token = page.get("NextContinuationToken")


def _run(fs: Any, coro: Any, where: str) -> Any:
    """Run one coroutine on s3fs's loop; botocore faults become ``Transient`` / ``InputError``."""
    import botocore.exceptions as bce
    from fsspec.asyn import sync

    try:
        return sync(fs.loop, lambda: coro, timeout=None)
    except bce.ClientError as exc:
        err = exc.response.get("Error", {})
        code = str(err.get("Code", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if code in TRANSIENT_CODES or status == 429 or status >= 500:
            raise Transient(f"HTTP {status} {code}".strip()) from None
        if code in ("PreconditionFailed", "412") or status == 412:
            raise InputError(
                f"{where}: changed on the server while ckpt read it (ETag no longer matches, "
                "HTTP 412); nothing is written under a final name: rerun once the source is stable"
            ) from None
        if code in ("NoSuchKey", "NoSuchBucket", "404") or status == 404:
            raise InputError(f"{where}: not found ({code}); check the bucket and key") from None
        if status in (401, 403) or code in ("AccessDenied", "InvalidAccessKeyId"):
            raise InputError(
                f"{where}: access denied ({code}); check AWS_PROFILE / AWS_ACCESS_KEY_ID"
            ) from None
        raise InputError(f"{where}: S3 error {code or status}") from None
    except (bce.NoCredentialsError, bce.PartialCredentialsError) as exc:
        raise InputError(
            f"{where}: no S3 credentials ({type(exc).__name__}); set AWS_PROFILE "
            "or AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY"
        ) from None
    except (TimeoutError, bce.BotoCoreError, OSError) as exc:
        raise Transient(f"{type(exc).__name__}") from None
    except Exception as exc:
        if type(exc).__module__.startswith("aiohttp"):
            raise Transient(f"{type(exc).__name__}") from None
        raise
